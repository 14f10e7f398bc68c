// The safetensors reader on any bytes: sniff, then read_safetensors (the header JSON and every rule
// of the format). A header it accepts is checked against the rules it claims to enforce.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "ckpt/dtype.hpp"
#include "ckpt/error.hpp"
#include "formats/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    ckpt::ByteView file{data, size};
    (void)ckpt::sniff_safetensors(file);
    try {
        ckpt::SafetensorsHeader h = ckpt::read_safetensors(file);
        // Accepted: every tensor lies in the data buffer, in bounds, and they tile it exactly.
        uint64_t buffer = 8 + h.header_size;
        std::vector<const ckpt::SafetensorsTensor*> by_offset;
        for (const auto& t : h.tensors) {
            if (t.begin < buffer || t.end < t.begin || t.end > size) std::abort();
            if (t.end - t.begin != t.numel * ckpt::dtype_size(t.dtype)) std::abort();
            (void)ckpt::safetensors_dtype_name(t.dtype);
            by_offset.push_back(&t);
        }
        std::stable_sort(by_offset.begin(), by_offset.end(),
                         [](auto* a, auto* b) { return a->begin != b->begin ? a->begin < b->begin : a->end < b->end; });
        uint64_t at = buffer;
        for (const auto* t : by_offset) {
            if (t->begin != at) std::abort();
            at = t->end;
        }
        if (at != size) std::abort();
    } catch (const ckpt::Error&) {
    }
    return 0;
}
