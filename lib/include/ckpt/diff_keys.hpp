// `diff-keys`: the key set of a checkpoint's state dict against a reference (another checkpoint or a
// JSON key manifest), the way load_state_dict(strict=True) would see it, and the prefix change that
// would make them fit.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.hpp"
#include "ckpt/dims.hpp"
#include "ckpt/text_store.hpp"
#include "ckpt/report.hpp"

namespace ckpt {

// One key: its name, dtype ("" when the source does not say) and shape (unset when it does not).
// The texts are views of the KeySet's own (KeySet::text) or static text: valid while the set lives.
struct KeyInfo {
    std::string_view name;
    std::string_view dtype;
    std::optional<Dims> shape;
};

struct KeySet {
    std::string path;
    std::string kind;             // "checkpoint" | "torchscript" | "manifest"
    std::string state_dict_path;  // checkpoints: where the state dict sits ("" top level)
    std::vector<KeyInfo> keys;    // in order, unique names
    TextStore text;               // the text the keys view
    // A key at the end, its name (and a dtype that is not static text) copied into `text`.
    void add(std::string_view name, std::string_view dtype = {}, std::optional<Dims> shape = {}) {
        keys.push_back({text.keep(name), dtype, std::move(shape)});
    }
};

// The state dict of an open checkpoint (tensor entries; other values have no shape or dtype).
KeySet key_set_of(const Checkpoint& c);

// A checkpoint or a JSON manifest, told apart by content. A manifest is any of:
//   [{"key": "conv1.weight", "shape": [64, 3, 7, 7], "dtype": "float32"}, …]   (shape, dtype optional)
//   ["conv1.weight", …]
//   {"keys": [ …either list… ]}
//   the output of `ckpt-tool inspect --json` (its state-dict tensors, by state_dict_key)
// A TorchScript model is read through the LibTorch backend (torch::jit::load: named parameters and
// buffers). Throws Error naming the path for anything else.
KeySet read_key_set(const std::string& path, const OpenOptions& open = {});

struct DiffOptions {
    std::vector<std::string> ignore;  // globs; matching keys are left out on both sides
    bool strict_dtype = false;        // dtype differences count as a mismatch
};

struct ShapeMismatch {
    std::string key;
    std::vector<int64_t> shape, reference_shape;
};

struct DTypeMismatch {
    std::string key, dtype, reference_dtype;
};

// The prefix change that makes most keys match: strip `strip` from the keys of the checkpoint that
// carry it, then add `add` to every key.
struct PrefixFix {
    std::string strip, add;
    std::string command;   // the strip-prefix command that applies it ("" when FILE is no checkpoint)
    size_t matched = 0, missing = 0, unexpected = 0, shape_mismatch = 0;
    bool complete() const { return missing == 0 && unexpected == 0 && shape_mismatch == 0; }
};

struct KeyDiff {
    std::string file, reference;
    size_t keys = 0, reference_keys = 0, matched = 0;
    size_t ignored = 0, reference_ignored = 0;
    std::vector<std::string> missing, unexpected;
    std::vector<ShapeMismatch> shape_mismatch;
    std::vector<DTypeMismatch> dtype_mismatch;
    std::optional<PrefixFix> prefix_fix;
    bool strict_dtype = false;
    bool match() const {
        return missing.empty() && unexpected.empty() && shape_mismatch.empty() &&
               (!strict_dtype || dtype_mismatch.empty());
    }
};

KeyDiff diff_keys(const KeySet& file, const KeySet& reference, const DiffOptions& options);

nlohmann::json to_json(const KeyDiff& diff);
struct DiffTextOptions {
    bool all = false;  // every row of every list
};
void render_text(const KeyDiff& diff, std::ostream& out, const TextStyle& style, const DiffTextOptions& options = {});
// `--format github`: a notice with the prefix fix (and its command) first, then one annotation per
// missing, unexpected, shape-mismatched and dtype-mismatched key (dtype: a warning without
// strict_dtype), on `diff.file`; every row, render_github applies the cap.
std::vector<Annotation> github_annotations(const KeyDiff& diff);

}  // namespace ckpt
