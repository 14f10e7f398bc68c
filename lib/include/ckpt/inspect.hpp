// `inspect`: what a checkpoint holds, from its directory and pickle alone.
#pragma once

#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.hpp"
#include "ckpt/globals.hpp"
#include "ckpt/report.hpp"
#include "ckpt/weights_only.hpp"

namespace ckpt {

struct InspectOptions {
    std::vector<std::string> key_globs;  // --keys: list only matching tensors (by key or name)
    bool all = false;                    // --all: every tensor, no elided rows
    const GlobalPolicy* policy = &GlobalPolicy::standard();  // how globals are judged (--allow)
};

struct TensorRow {
    // Views of the checkpoint's own strings (Entry::key, StateDictEntry::name): a report lives no
    // longer than the checkpoint it points at.
    // 32 bytes: a row a tensor, 100,000 of them for a mixture-of-experts model.
    std::string_view key;                     // dotted path from the root
    const std::string_view* name = nullptr;   // its name in the state dict (StateDictEntry::name), or null
    uint32_t tensor = 0;                      // index into Checkpoint::tensors
    bool shared = false;                      // its storage is viewed by another tensor too
};

struct ObjectRow {
    std::string key, type, repr;
};

struct Hint {
    std::string kind;     // "wrapper_prefix", "common_prefix", "no_state_dict" …
    std::string message;
    std::string command;  // a command that repairs it, or ""
};

struct Warning {
    std::string kind;     // "unknown_global", "dangerous_global", "unreferenced_records"
    std::string message;
};

struct DTypeTotal {
    std::string dtype;
    uint64_t tensors = 0, elements = 0, bytes = 0;
};

struct Totals {
    uint64_t tensors = 0, elements = 0, bytes = 0;
    std::vector<DTypeTotal> by_dtype;  // in order of first appearance
    void add(const TensorInfo& t, uint64_t bytes);  // bytes: Checkpoint::tensor_bytes
};

struct OptimizerSummary {
    std::string key;                  // "optimizer"
    size_t param_groups = 0, params = 0, states = 0;
    std::vector<std::string> state_fields;  // exp_avg, exp_avg_sq, step …
    std::string hyperparameters;            // "lr=0.001, betas=(0.9, 0.999), …" of the first group
};

struct InspectReport {
    const Checkpoint* checkpoint = nullptr;
    InspectOptions options;
    std::vector<TensorRow> tensors;    // every tensor entry (all, not filtered), in file order
    std::vector<ObjectRow> objects;    // non-tensor leaves
    std::vector<OptimizerSummary> optimizers;
    std::vector<Hint> hints;
    std::vector<Warning> warnings;
    std::vector<GlobalVerdict> globals;  // the checkpoint's globals, judged by the options' policy, in order
    std::vector<WeightsOnlyAnswer> weights_only;  // torch.load(weights_only=True) in torch 2.6, then 1.13
    Totals state_dict_totals, all_totals;
    uint64_t storage_bytes = 0;        // unique storages
    bool listed(const TensorRow& row) const;  // passes --keys
};

// Throws Error(corrupt) when the file's tensors do not fit its storages (the first problem, and how
// many more there are), or when a record's frame shows damage (Checkpoint::frame_problems: parts of
// two saves in one file): the checks that cost no tensor byte. verify reads every byte.
InspectReport inspect(const Checkpoint& checkpoint, const InspectOptions& options);

nlohmann::json to_json(const InspectReport& report);
// The same text as to_json(report).dump(2) (invalid UTF-8 replaced) and a newline, written as it
// goes: the tensors and storages arrays are not built as a document first.
void write_json(const InspectReport& report, std::ostream& out);

void render_text(const InspectReport& report, std::ostream& out, const TextStyle& style);

}  // namespace ckpt
