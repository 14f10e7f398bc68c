// The JSON readers on any bytes that parse as JSON: fingerprint_from_json (a --write-fingerprint
// file or a verify --json report) against read_fingerprint_file, the row-by-row reader verify uses
// (the same result or the same error, else a crash) and the diff-keys key manifest reader
// (read_key_set on a file: a list of keys or of {key, shape, dtype}, {"keys": …}, inspect --json,
// a fingerprint), which takes a path, so the bytes go to a memfd first.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "ckpt/diff_keys.hpp"
#include "ckpt/error.hpp"
#include "ckpt/fingerprint.hpp"
#include "ckpt/report.hpp"
#include "io/json.hpp"
#include "fuzz_support.hpp"

namespace {
// A reader's result as text: the fingerprint's JSON, or the error's kind and message.
template <class Read>
std::string outcome(Read read) {
    try {
        return ckpt::to_json(read()).dump(1, ' ', false, nlohmann::json::error_handler_t::replace);
    } catch (const ckpt::Error& e) {
        return "error " + std::to_string(static_cast<int>(e.kind())) + ": " + e.what();
    }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, false);
    if (j.is_discarded()) return 0;
    const std::string& path = ckpt_fuzz::input_file().write(data, size);
    std::string whole = outcome([&] {
        if (ckpt::json_string_or(j, "command") == "inspect")  // as verify said it before it streamed
            throw ckpt::Error(ckpt::ErrorKind::usage, path,
                              "an inspect report holds no statistics; write a fingerprint with verify --write-fingerprint");
        return ckpt::fingerprint_from_json(path, j);
    });
    // verify reads a fingerprint file row by row: it must say what the document reader says.
    if (ckpt::json_text({data, size})) {
        std::string streamed = outcome([&] { return *ckpt::read_fingerprint_file(path); });
        if (streamed != whole) __builtin_trap();
    }
    try {
        ckpt::KeySet ks = ckpt::read_key_set(path);
        (void)ks.keys.size();
    } catch (const ckpt::Error&) {
    }
    return 0;
}
