// The safetensors format, read and checked rule by rule. The layout:
//   [0, 8)        N: u64 little-endian, the header's length (at most 100,000,000 bytes)
//   [8, 8+N)      the header: UTF-8 JSON, one object; trailing spaces allowed (writers pad to 8)
//                   "__metadata__": {string: string}   (optional)
//                   NAME: {"dtype": "F32", "shape": [d0, …], "data_offsets": [begin, end]}
//   [8+N, EOF)    the data buffer; offsets are relative to its start, end exclusive
// Rules (each broken one is an Error naming it): a valid JSON object; no name twice; no tensor
// named __metadata__; a known dtype; non-negative integer dims whose product does not overflow;
// end - begin == numel × element size; the tensors, sorted by offset, cover the buffer from 0 to
// its end with no gap and no overlap; the buffer ends at the end of the file.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/bytes.hpp"
#include "ckpt/dims.hpp"
#include "ckpt/dtype.hpp"

namespace ckpt {

struct SafetensorsTensor {
    std::string name;
    DType dtype = DType::float32;
    Dims shape;
    uint64_t numel = 0;
    uint64_t begin = 0, end = 0;  // in the file (the header's offsets + 8 + N)
};

struct SafetensorsHeader {
    uint64_t header_size = 0;                                  // N
    std::vector<SafetensorsTensor> tensors;                    // in header order
    std::vector<std::pair<std::string, std::string>> metadata;  // __metadata__, in header order
};

constexpr uint64_t k_safetensors_max_header = 100'000'000;

// True when `file` starts like a safetensors file (a plausible header length, then '{').
bool sniff_safetensors(ByteView file);
// Throws Error (corrupt / limit / unsupported) for any broken rule, with the byte offset.
SafetensorsHeader read_safetensors(ByteView file);

// The header a writer puts first: the 8-byte length, then the JSON laid out as nlohmann's compact
// dump() lays it out (the reference library reads it, and strip-prefix and convert write it alike):
// __metadata__ first when there is one, then each tensor in the order added, padded with spaces to
// a multiple of 8 bytes. The data buffer follows at bytes().size(). Built as text, not as a JSON
// document of a node per value.
class SafetensorsHeaderWriter {
public:
    // `metadata`: __metadata__'s members in order (a key given again keeps its first place and takes
    // the last value, as a JSON object assigned to would); nullptr: no __metadata__ at all.
    explicit SafetensorsHeaderWriter(const std::vector<std::pair<std::string, std::string>>* metadata);
    // A tensor whose bytes are [begin, end) of the data buffer. Names must be new (the caller's plan
    // made them so); a name that is not UTF-8 throws nlohmann's type_error, as dump() does.
    void add(std::string_view name, DType dtype, const Dims& shape, uint64_t begin, uint64_t end);
    // The file's first bytes: the length, then the padded header.
    std::string finish();

private:
    std::string m_text;
};

// safetensors' dtype names ("F32", "BF16" …) and ours, both ways (nullopt: no such type there).
std::optional<DType> dtype_from_safetensors(std::string_view name);
std::optional<std::string_view> safetensors_dtype_name(DType dtype);

}  // namespace ckpt
