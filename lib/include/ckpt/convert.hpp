// `convert`: a checkpoint's state dict written as safetensors, safetensors or a state dict written as
// torch.save writes one, and a whole training checkpoint written again (pth → pth, optionally cast).
//
// pth → pth keeps the whole checkpoint: its pickle is patched, not re-serialised (every byte stays
// but, with --dtype, the storage classes of the state dict's cast storages), and its records are
// copied by the kernel or cast. --weights-only (or any shard output) writes the state dict alone.
// Shards (--max-shard-size) are cut by tensor for safetensors and by storage for pth, so tensors
// that share a storage stay in one shard; an index names them as Hugging Face does.
//
// Tensors that are the same view of the same storage (tied weights) are written once; each alias is
// recorded in __metadata__ as alias → kept name, as safetensors' own converter does. Views and
// transposes are written contiguous, row-major. The header lists __metadata__ first, then the
// tensors in data order: larger elements first, then by name (the reference writer's order), padded
// with spaces to a multiple of 8. After writing, unless told not to, the output is read back and
// every tensor's content hash compared with the source's; any difference and nothing is written.
#pragma once

#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.hpp"
#include "ckpt/report.hpp"

namespace ckpt {

struct ConvertRequest {
    std::string input, output;
    std::string to;  // "safetensors" | "pth"; "" = from the output's extension
    std::vector<std::pair<std::string, std::string>> metadata;  // --metadata K=V, added to __metadata__
    OpenOptions open;
    bool verify = true, force = false;
    bool weights_only = false;  // pth → pth: the state dict alone (default: the whole checkpoint)
    std::optional<DType> dtype; // --dtype: floating-point tensors cast (through the LibTorch backend)
    uint64_t max_shard_size = 0;  // --max-shard-size: shards + a Hugging Face index; 0: one file
    // --allow-expansion: write an output more than k_expansion_factor times the input's size (views
    // that repeat their elements, torch's expand, written out in full). Refused without it.
    bool allow_expansion = false;
    std::function<void(uint64_t, uint64_t)> progress;  // bytes of tensor data written, of all
    // merge: the names the state dict's tensors are written under (--strip-prefix); none: as they are.
    std::function<std::string(const std::string&)> rename;
    // merge, pth only: a dict of these top-level entries of the input's value tree (output key,
    // input key; "*" for every entry of the root, "K.*" for every entry of the dict K), each written with all it holds (the state dict's
    // names renamed); empty: the state dict alone.
    std::vector<std::pair<std::string, std::string>> tree;
};

// "2GB" → 2,000,000,000; "512MiB" → 536,870,912; units B, KB, MB, GB, TB and KiB … TiB. Throws
// Error(usage) for anything else.
uint64_t parse_size(const std::string& text);

struct ConvertReport {
    std::string input, output, format;
    std::vector<std::string> outputs;                            // every file written (shards, then the index)
    size_t tensors = 0;                                          // written
    std::vector<std::pair<std::string, std::string>> deduplicated;  // alias, kept
    std::vector<std::string> skipped;                            // non-tensor values of the state dict
    std::vector<std::string> dropped;                            // top-level keys left out (all but a whole pth → pth)
    // Globals of the input off the allow-lists (unknown or dangerous, as scan judges them) that the
    // output, a state dict alone, no longer names: "__main__.Config (unknown)".
    std::vector<std::string> globals_dropped;
    std::vector<std::string> metadata_dropped;                   // safetensors → pth: __metadata__ keys (not aliases, not "format")
    std::vector<std::pair<std::string, std::string>> renamed;    // rename: written name, the input's
    size_t made_contiguous = 0;
    size_t cast = 0;                                             // tensors written as --dtype
    uint64_t bytes_written = 0;
    bool verified = false;
};

// An output past this many times its input (and past k_expansion_floor bytes) is refused unless
// ConvertRequest::allow_expansion: 823 bytes that expand to 10^12 elements are no 3.6 TiB file to
// start writing without being asked.
constexpr uint64_t k_expansion_factor = 1000;
constexpr uint64_t k_expansion_floor = uint64_t{1} << 30;

ConvertReport convert(const ConvertRequest& request);

nlohmann::json to_json(const ConvertReport& r);
void render_text(const ConvertReport& r, std::ostream& out, const TextStyle& style);

}  // namespace ckpt
