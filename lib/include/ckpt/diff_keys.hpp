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
    // What the fix leaves (the real problem once the prefix is right), by the names after it:
    // missing and unexpected keys, and the keys whose shapes differ. Filled for the fix diff_keys gives.
    std::vector<std::string> residue_missing, residue_unexpected;
    std::vector<ShapeMismatch> residue_shape;
};

struct KeyDiff {
    std::string file, reference;
    size_t keys = 0, reference_keys = 0, matched = 0;
    size_t ignored = 0, reference_ignored = 0;
    std::vector<std::string> missing, unexpected;
    std::vector<ShapeMismatch> shape_mismatch;
    std::vector<DTypeMismatch> dtype_mismatch;
    std::optional<PrefixFix> prefix_fix;
    // Shapes that differ, in words: the likely cause (one module of another size: a classifier for
    // another number of classes?) and how to load the rest; "" when no shape differs.
    std::string shape_hint;
    bool strict_dtype = false;
    bool match() const {
        return missing.empty() && unexpected.empty() && shape_mismatch.empty() &&
               (!strict_dtype || dtype_mismatch.empty());
    }
};

KeyDiff diff_keys(const KeySet& file, const KeySet& reference, const DiffOptions& options);

nlohmann::json to_json(const KeyDiff& diff);
struct DiffTextOptions {
    bool all = false;  // every row of every list, every key on its own line
};
// Keys for people: the keys of one module together ("bn2 (5 keys: weight, bias, …)"), and modules
// numbered in a row with the same keys as one ("layers.9–11 (2 keys each: weight, bias)"); a key
// alone as it is. In the order of `keys`.
std::vector<std::string> grouped_keys(const std::vector<std::string>& keys);
void render_text(const KeyDiff& diff, std::ostream& out, const TextStyle& style, const DiffTextOptions& options = {});
// `--format github`: a prefix fix is one error naming the cause, the fix and its command, and the
// keys; then one annotation per group of keys (grouped_keys) missing, unexpected or shape-mismatched
// that the fix leaves (all of them without a fix), and per dtype-mismatched key (a warning without
// strict_dtype), on `diff.file`; render_github applies the cap.
std::vector<Annotation> github_annotations(const KeyDiff& diff);

}  // namespace ckpt
