// Private to the library: what the readers of Megatron-LM's two formats share. megatron.cpp finds
// the save's folder and iteration and opens it; megatron_torch.cpp joins the rank files of
// --ckpt-format torch; megatron_dist.cpp renames the items of a torch_dist folder.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "formats/dist.hpp"

namespace ckpt::megatron {

extern const char* const k_rank_file;  // model_optim_rng.pt
// mp_rank_TT, mp_rank_TT_PPP, mp_rank_TT_PPP_EEE (what each suffix is depends on args).
const std::regex& rank_dir_pattern();

// Megatron's `args`: an argparse.Namespace whose attributes pickle restores as its BUILD state.
struct Args {
    const Value* v = nullptr;
    std::optional<int64_t> i(std::string_view name) const { return dist::int_of(dist::field(v, name)); }
    int64_t i(std::string_view name, int64_t fallback) const { return i(name).value_or(fallback); }
    bool b(std::string_view name, bool fallback = false) const { return i(name).value_or(fallback) != 0; }
    std::string s(std::string_view name) const { return std::string(dist::str_of(dist::field(v, name)).value_or("")); }
};

DistInfo::Degrees degrees_of(const Args& a);
// The model's shape from args, as inspect shows it (DistInfo::model_shape).
void describe_model(const Args& a, DistInfo& info);
// The "layers.N." of a name (decoder.layers.3.mlp…, language_model.encoder.layers.3.…): where N starts
// and its length (≤ 9 digits); npos when there is none.
std::pair<size_t, size_t> layer_number(const std::string& name);
// A local expert's number: mlp.experts.local_experts.J. (SequentialMLP) or …linear_fcK.weightJ (TEGroupedMLP).
std::pair<size_t, size_t> expert_number(const std::string& name);
// `name` with the number at `at` replaced by n.
std::string renumbered(const std::string& name, std::pair<size_t, size_t> at, int64_t n);
// Pieces that follow each other in one file made one.
std::vector<RecordPiece> joined(std::vector<RecordPiece> pieces);
// Bytes [start, start + n) of what `pieces` hold one after the other (untyped pieces).
std::vector<RecordPiece> bytes_of(const std::vector<RecordPiece>& pieces, uint64_t start, uint64_t n);

// One rank's file of a --ckpt-format torch save (or of a .nemo): its model chunks, one per virtual stage.
struct RankFile {
    int tp = 0, pp = 0, ep = 0;
    std::string rel;
    std::unique_ptr<Checkpoint> part;
    std::vector<std::vector<std::pair<std::string, const Value*>>> chunks;  // per virtual stage: its model's entries
    std::vector<std::map<std::string, const Value*>> by_name;                // the same, by name
};
// A chunk: the state dict `m` of f.part (nested dicts joined with '.').
void add_chunk(RankFile& f, const Value* m);
// Every rank's file, opened and in (pp, ep, tp) order, each with d.virtual_pipeline chunks; args
// gives the model's shape and Megatron's switches (swiglu, untie_embeddings_and_output_weights,
// num_experts, padded_vocab_size …).
struct RankFiles {
    Args args;
    DistInfo::Degrees d;
    std::vector<RankFile> files;
    std::string first_path;  // names args' source in errors
};
// The chunks joined into `model` (an ordered dict): layers renumbered from each chunk's own numbers,
// experts from their expert-parallel rank, tensor-parallel pieces joined by Megatron's rules (a
// split tensor no rule covers is refused), replicas and the tied copy listed in the view's DistInfo.
void join_rank_files(DistView& view, const std::string& dir, Value* model, RankFiles& set);

// --unpad-vocab: the word embeddings and output layer under root["model"] (and their moments under
// root["optimizer_moments"]) cut to their first `rows` rows; rows ≤ 0 (nothing recorded) is Error(usage).
void unpad(Checkpoint::Contents& c, Value* root, int64_t rows, const std::string& dir);

// The two formats, each into `root` ("model" the state dict), with args' vocab_size.
void open_torch_format(DistView& view, const std::string& dir, Value* root, std::optional<int64_t>& vocab);  // megatron_torch.cpp
// torch_dist: `given_args` stands in when common.pt holds none (NeMo 2 keeps the config beside the
// weights); `pre` is the prefix of every model key ("module." in NeMo 2).
void open_torch_dist(DistView& view, const std::string& dir, Value* root, std::optional<int64_t>& vocab, const Value* given_args = nullptr,
                     const std::string& pre = "");  // megatron_dist.cpp

}  // namespace ckpt::megatron
