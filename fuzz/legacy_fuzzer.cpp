// Checkpoint::open on any bytes, as `ckpt-tool inspect FILE` runs it: the input is written to a memfd
// and opened by its /proc/self/fd path, so the sniffing (zip, safetensors, legacy, other formats) and
// the legacy reader (lib/src/legacy.cpp: header pickles, the object through TorchHooks, the key list,
// the storage counts) run exactly as on a file. The seeds are legacy files (torch.save with
// _use_new_zipfile_serialization=False), plus a few zips and safetensors for the other readers.
// An opened checkpoint is then inspected (report and JSON), its key set taken, its records read, and
// fingerprinted when that is cheap (element count bounded: a stride-0 view may claim 2^60 elements).
#include <cstdint>
#include <string>

#include "ckpt/checkpoint.hpp"
#include "ckpt/diff_keys.hpp"
#include "ckpt/error.hpp"
#include "ckpt/fingerprint.hpp"
#include "ckpt/inspect.hpp"
#include "io/zip.hpp"
#include "fuzz_support.hpp"

namespace {
constexpr size_t k_max_records = 256;
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string& path = ckpt_fuzz::input_file().write(data, size);
    std::unique_ptr<ckpt::Checkpoint> c;
    try {
        c = ckpt::Checkpoint::open(path);
    } catch (const ckpt::Error&) {
        return 0;
    }
    try {
        (void)ckpt::key_set_of(*c);
    } catch (const ckpt::Error&) {
    }
    for (size_t i = 0; i < c->records().size() && i < k_max_records; ++i) {
        try {
            (void)ckpt::crc32_of(c->record_data(i).view());
        } catch (const ckpt::Error&) {
        }
    }
    ckpt_fuzz::inspect_and_fingerprint(*c);
    return 0;
}
