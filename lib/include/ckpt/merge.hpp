// `merge`: a checkpoint distributed training wrote in many files (a DeepSpeed ZeRO folder, a
// torch.distributed.checkpoint folder) written as one plain checkpoint that torch.load reads with
// weights_only=True, from the merged view (Checkpoint::dist), tensor by tensor: memory for the
// largest tensor, whatever the model's size.
//
// What is written is what the reference tools give: DeepSpeed's zero_to_fp32 a state dict of the
// fp32 masters (frozen parameters and tied names included); DCP's dcp_to_torch_save the whole
// nested dict the folder holds. --optimizer (DeepSpeed) writes {"model": state dict, "optimizer":
// torch's optimizer state_dict layout}. Any other checkpoint merges to its state dict. Output by
// extension: .safetensors (the state dict; --shard-size: shards and an index) or .pth / .pt / .bin.
// Written through convert: atomically, read back and compared tensor by tensor.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.hpp"
#include "ckpt/convert.hpp"
#include "ckpt/report.hpp"

namespace ckpt {

struct MergeRequest {
    std::string input, output;
    OpenOptions open;                // --tag, --state-dict-key
    std::optional<DType> dtype;      // --dtype
    bool strip_wrappers = false;     // --strip-prefix with no value
    std::vector<std::string> strip;  // --strip-prefix P (repeatable): a leading P removed
    bool optimizer = false;          // --optimizer
    uint64_t shard_size = 0;         // --shard-size
    bool dry_run = false, force = false, verify = true;
    bool allow_expansion = false;    // --allow-expansion (ConvertRequest::allow_expansion)
    std::function<void(uint64_t, uint64_t)> progress;
};

struct MergeReport {
    std::string input, output;
    std::optional<DistInfo> dist;    // what the input is (none for a single checkpoint)
    std::string written;             // "state_dict" | "tree" (a DCP folder's nesting) | "model+optimizer"
    size_t tensors = 0;              // to write
    uint64_t tensor_bytes = 0;
    std::vector<std::pair<std::string, std::string>> renamed;  // written name, the input's
    std::vector<std::string> notes;
    bool dry_run = false;
    std::optional<ConvertReport> convert;  // what was written (not with --dry-run)
};

// The wrapper prefixes of DDP, FSDP, activation checkpointing and torch.compile removed wherever
// they stand in a dotted key: module., _fsdp_wrapped_module., _checkpoint_wrapped_module., _orig_mod.
std::string strip_wrapper_prefixes(const std::string& key);

MergeReport merge(const MergeRequest& request);

nlohmann::json to_json(const MergeReport& r);
void render_text(const MergeReport& r, std::ostream& out, const TextStyle& style);

}  // namespace ckpt
