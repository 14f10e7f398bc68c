// DeepSpeed's folders as files on disk (private to the library): which folder is a tag folder, which
// tag a path means, which rank files a tag holds. deepspeed.cpp reads them; dist.cpp's dist_target
// and deepspeed_folder_of (dist.hpp) recognise them.
#pragma once

#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ckpt/checkpoint.hpp"

namespace ckpt {

// A folder holding rank files (*_model_states.pt, *_optim_states.pt).
bool deepspeed_tag_folder(const std::string& dir);
// A rank file's name: mp_rank_00_model_states.pt, [bf16_]zero_pp_rank_R_mp_rank_00_{model,optim}_states.pt.
bool deepspeed_rank_name(const std::string& base);

// A DeepSpeed rank file (mp_rank_00_model_states.pt, [bf16_]zero_pp_rank_R_mp_rank_00_*_states.pt)
// beside its tag folder's other rank files: that folder ("" otherwise). merge reads the folder, and
// inspect points there.
std::string deepspeed_folder_of(const std::string& path);

// The tag folder `given` means: itself when it is one (and --tag agrees), else under it the one
// --tag names, or `latest`, or the only one there is; fills info.tag, info.tags and info.latest.
// Error naming `given` when no single tag is meant.
std::string deepspeed_tag_dir(const std::string& given, const OpenOptions& options, DistInfo& info);

struct DeepSpeedRankFiles {
    std::string model;                         // ZeRO-1/2: mp_rank_00_model_states.pt
    std::map<int, std::string> model_ranks;    // ZeRO-3: rank → zero_pp_rank_R_mp_rank_00_model_states.pt
    std::map<int, std::string> optim;          // rank → [bf16_]zero_pp_rank_R_mp_rank_00_optim_states.pt
    std::set<std::string> optim_prefixes;      // "" and/or "bf16_"
};

// The rank files of a tag folder; Error for tensor- or pipeline-parallel files, or a rank twice.
DeepSpeedRankFiles deepspeed_rank_files(const std::string& dir);

// A universal checkpoint's trainable parameters (deepspeed_universal.cpp), in param_shapes' order,
// each the tensor of TAG/zero/<name>/fp32.pt in the parameter's shape; Adam's moments (exp_avg.pt,
// exp_avg_sq.pt) as `moments` (moment → name → tensor), null when there are none. Error naming the
// file for a parameter without its folder, a folder of no parameter, or a tensor of another size.
struct UniversalParams {
    std::vector<std::pair<std::string, Value*>> params;
    Value* moments = nullptr;
    size_t moment_files = 0;
};
struct DistView;

// What deepspeed.cpp's readers share. param_shapes: a list per group of name → torch.Size (a
// single dict in some versions).
using Shapes = std::vector<std::vector<std::pair<std::string, std::vector<int64_t>>>>;
Shapes param_shapes(const Value* v, const std::string& file);
// frozen_param_shapes and the like: name → torch.Size in a dict (`what` names it in errors); none: [].
std::vector<std::pair<std::string, std::vector<int64_t>>> named_shapes(const Value* d, const std::string& file, const char* what);
// A merged state dict in the making: names in order, a name set again keeps its place.
struct Ordered {
    std::vector<std::pair<std::string, Value*>> items;
    std::unordered_map<std::string, size_t> at;
    void set(const std::string& k, Value* v) {
        auto [it, fresh] = at.emplace(k, items.size());
        if (fresh) items.push_back({k, v});
        else items[it->second].second = v;
    }
    Value* get(const std::string& k) const {
        auto it = at.find(k);
        return it == at.end() ? nullptr : items[it->second].second;
    }
};
// shared_params (alias → the name it is tied to): each alias the same value as its name, or a note.
void tie_shared(const Value* shared, Ordered& sd, DistInfo& info);
// A universal checkpoint's state dict into `sd` (deepspeed_universal.cpp): buffers and frozen
// parameters from `m0`'s module as stored, the fp32 parameters (read_universal), tied names; Adam's
// moments under root["optimizer_moments"]. `zero3`: m0 is a ZeRO-3 rank's module states.
void merge_universal(DistView& view, const std::string& tagdir, const Checkpoint& m0, const std::set<std::string>& buffer_names, bool zero3,
                     Ordered& sd, Value* root);
// Pipeline checkpoints (deepspeed_pipeline.cpp): a tag folder with layer_NN-model_states.pt files,
// read into the view (the state dict "module" as `<NN>.<name>`, beside the rest of stage 0's module
// states), checked against every stage's param_shapes; a model (tensor-parallel) axis is refused.
bool deepspeed_pipeline_folder(const std::string& dir);
void read_deepspeed_pipeline(DistView& view, const std::string& tagdir);
UniversalParams read_universal(DistView& view, const std::string& tagdir, const std::vector<std::pair<std::string, std::vector<int64_t>>>& shapes);

}  // namespace ckpt
