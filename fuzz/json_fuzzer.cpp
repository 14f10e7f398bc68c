// The JSON readers on any bytes that parse as JSON: fingerprint_from_json (what verify reads from a
// --write-fingerprint file or a verify --json report) and the diff-keys key manifest reader
// (read_key_set on a file: a list of keys or of {key, shape, dtype}, {"keys": …}, inspect --json,
// a fingerprint), which takes a path, so the bytes go to a memfd first.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "ckpt/diff_keys.hpp"
#include "ckpt/error.hpp"
#include "ckpt/fingerprint.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, false);
    if (j.is_discarded()) return 0;
    try {
        ckpt::Fingerprint f = ckpt::fingerprint_from_json("fuzz.json", j);
        (void)ckpt::to_json(f).dump(1, ' ', false, nlohmann::json::error_handler_t::replace);
    } catch (const ckpt::Error&) {
    }
    const std::string& path = ckpt_fuzz::input_file().write(data, size);
    try {
        ckpt::KeySet ks = ckpt::read_key_set(path);
        (void)ks.keys.size();
    } catch (const ckpt::Error&) {
    }
    return 0;
}
