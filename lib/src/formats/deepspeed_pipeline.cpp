// DeepSpeed's pipeline checkpoints (PipelineEngine, runtime/pipe/module.py save_state_dict): the
// weights are not in the model-states files (their `module` is None) but one file per layer,
//   TAG/layer_NN-model_states.pt       the layer module's own state_dict (local names, buffers and
//                                      frozen parameters included), NN its place in the layer list
//                                      (a layer without state — a function — gets no file)
//   TAG/mp_rank_SS_model_states.pt     one per pipeline stage (mp = stage × TP + tp; no TP here):
//                                      param_shapes in PipelineModule's names (<NN>.<name>,
//                                      tied_modules.<key>.<name>), buffer_names, steps, config
//   TAG/zero_pp_rank_R_mp_rank_SS_optim_states.pt   each stage's ZeRO partitions of its fp32 masters
// Merged as the layer files say: `<NN>.<name>` for every entry, as stored. With a model (tensor-
// parallel) axis the files are layer_NN-model_TT-model_states.pt, and how each tensor was split is
// not recorded in them: refused.
#include <map>
#include <regex>
#include <set>

#include "base/text_util.hpp"
#include "ckpt/error.hpp"
#include "formats/deepspeed_folder.hpp"
#include "formats/dist.hpp"
#include "model/contents.hpp"

namespace ckpt {

using dist::field;
using dist::int_of;
using dist::str_of;

bool deepspeed_pipeline_folder(const std::string& dir) {
    static const std::regex layer(R"(layer_\d+-model(_\d+-model)?_states\.pt)");
    return any_name_matches(dir, layer);
}

void read_deepspeed_pipeline(DistView& view, const std::string& tagdir) {
    DistInfo& info = *view.c.dist;
    Value* root = view.dict();
    Value* sd = view.dict(true);
    view.set(root, "module", sd);
    static const std::regex layer(R"(layer_(\d+)-model_states\.pt)"), layer_tp(R"(layer_\d+-model_\d+-model_states\.pt)");
    static const std::regex stage_file(R"(mp_rank_(\d+)_model_states\.pt)"), optim(R"((bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_optim_states\.pt)");
    std::map<int, std::string> layers, stages;
    std::map<int, std::set<int>> optim_ranks;  // stage → data-parallel ranks
    std::smatch m;
    for (const std::string& n : dist::list_dir(tagdir)) {
        if (std::regex_match(n, layer_tp))
            throw Error(ErrorKind::unsupported, tagdir + "/" + n,
                        "is a layer file of a pipeline run with tensor parallelism: how each tensor was split over the model axis is not "
                        "recorded in the files; not merged rather than guessed");
        if (std::regex_match(n, m, layer)) layers[std::stoi(m[1])] = n;
        else if (std::regex_match(n, m, stage_file)) stages[std::stoi(m[1])] = n;
        else if (std::regex_match(n, m, optim)) optim_ranks[std::stoi(m[3])].insert(std::stoi(m[2]));
        else if (text::ends_with(n, "_model_states.pt") && text::starts_with(n, "zero_pp_rank_"))
            throw Error(ErrorKind::unsupported, tagdir + "/" + n, "is ZeRO-3 module states beside pipeline layer files: DeepSpeed's pipeline engine runs ZeRO-1 at most");
    }
    if (stages.empty()) throw Error(ErrorKind::corrupt, tagdir, "holds pipeline layer files but no mp_rank_SS_model_states.pt (the stages' module states)");
    int count = stages.rbegin()->first + 1;
    for (int s = 0; s < count; ++s)
        if (!stages.count(s))
            throw Error(ErrorKind::corrupt, tagdir + "/" + (s < 10 ? "mp_rank_0" : "mp_rank_") + std::to_string(s) + "_model_states.pt",
                        "is missing: stage " + std::to_string(s) + " of " + std::to_string(count) + "'s module states");
    // Every stage's module states: the same run (dp world size, version, step), each stage's optimizer files present.
    std::unique_ptr<Checkpoint> first;
    std::vector<std::pair<std::string, std::vector<int64_t>>> declared;  // every stage's param_shapes, with the file naming it
    std::vector<std::string> declared_in;
    std::set<std::string> buffers;
    int dp = 0;
    std::string version, steps;
    for (const auto& [s, name] : stages) {
        std::unique_ptr<Checkpoint> p = view.open_part(name);
        info.files.push_back(name);
        info.bytes += p->file_size();
        const Value* r = p->root();
        if (const Value* mod = field(r, "module"); mod && mod->kind != ValueKind::none)
            throw Error(ErrorKind::format, p->path(), "holds a module beside pipeline layer files: not a pipeline engine's module states");
        int this_dp = static_cast<int>(int_of(field(r, "dp_world_size")).value_or(1));
        std::string this_steps = repr(field(r, "global_steps"), 40);
        if (s == 0) {
            dp = this_dp;
            steps = this_steps;
            version = std::string(str_of(field(r, "ds_version")).value_or("?"));
        } else if (this_dp != dp || this_steps != steps) {
            throw Error(ErrorKind::corrupt, p->path(),
                        "is of dp_world_size " + std::to_string(this_dp) + " at global_steps " + this_steps + ", " + stages.begin()->second + " of " +
                            std::to_string(dp) + " at " + steps + ": files of two saves are mixed");
        }
        if (int mp = static_cast<int>(int_of(field(r, "mp_world_size")).value_or(count)); mp != count)
            throw Error(ErrorKind::corrupt, p->path(), "says mp_world_size " + std::to_string(mp) + ", the folder holds " + std::to_string(count) + " stages");
        if (const Value* ps = field(r, "param_shapes"); ps && (ps->kind == ValueKind::list || ps->kind == ValueKind::tuple))
            for (const Value* g : ps->items())
                for (size_t i = 0; g && g->kind == ValueKind::dict && i < g->dict_size(); ++i)
                    if (auto k = str_of(g->dict_key(i)); k) {
                        declared.emplace_back(std::string(*k), dist::ints_of(g->dict_value(i)).value_or(std::vector<int64_t>{}));
                        declared_in.push_back(name);
                    }
        if (const Value* b = field(r, "buffer_names"); b && (b->kind == ValueKind::list || b->kind == ValueKind::tuple))
            for (const Value* x : b->items())
                if (auto n = str_of(x)) buffers.insert(std::string(*n));
        for (int q = 0; q < dp; ++q)
            if (!optim_ranks[s].count(q))
                throw Error(ErrorKind::corrupt, tagdir + "/zero_pp_rank_" + std::to_string(q) + "_mp_rank_" + (s < 10 ? "0" : "") + std::to_string(s) + "_optim_states.pt",
                            "is missing: data-parallel rank " + std::to_string(q) + "'s optimizer states of stage " + std::to_string(s));
        if (s == 0) first = std::move(p);
    }
    if (layers.empty()) throw Error(ErrorKind::corrupt, tagdir, "holds no layer_NN-model_states.pt: the pipeline's weights are missing");
    // The layers, in the model's order, under their place in the layer list.
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const auto& [idx, name] : layers) {
        std::unique_ptr<Checkpoint> p = view.open_part(name);
        info.files.push_back(name);
        info.bytes += p->file_size();
        const Value* r = p->root();
        if (!r || r->kind != ValueKind::dict) throw Error(ErrorKind::format, p->path(), "is not a layer's state dict");
        for (size_t i = 0; i < r->dict_size(); ++i) {
            auto k = str_of(r->dict_key(i));
            if (!k) throw Error(ErrorKind::format, p->path(), "holds a key that is not a string: not a layer's state dict");
            std::string key = std::to_string(idx) + "." + std::string(*k);
            const Value* v = r->dict_value(i);
            if (v->kind == ValueKind::tensor) shapes[key] = p->tensors()[v->i()].shape;
            view.set(sd, key, view.copy(*p, v));
        }
    }
    // Every trainable parameter and buffer the stages name (but the tied modules', which live under
    // the layer that first holds them) is in the layer files, in that shape.
    for (size_t i = 0; i < declared.size(); ++i) {
        const auto& [name, shape] = declared[i];
        if (text::starts_with(name, "tied_modules.")) continue;
        auto it = shapes.find(name);
        if (it == shapes.end())
            throw Error(ErrorKind::corrupt, tagdir + "/" + declared_in[i], "names parameter " + name + ", which no layer file holds");
        if (it->second != shape)
            throw Error(ErrorKind::corrupt, tagdir + "/" + declared_in[i],
                        "names parameter " + name + " of shape " + dist::shape_text(shape) + ", its layer file holds " + dist::shape_text(it->second));
    }
    for (const std::string& b : buffers)
        if (!shapes.count(b)) throw Error(ErrorKind::corrupt, tagdir, "buffer " + b + " (buffer_names) is in no layer file");
    // The rest of stage 0's module states (steps, scheduler, client state).
    static const std::set<std::string> layout = {"module", "optimizer", "param_shapes", "frozen_param_shapes", "frozen_param_fragments",
                                                 "shared_params", "buffer_names"};
    const Value* r0 = first->root();
    for (size_t i = 0; i < r0->dict_size(); ++i) {
        auto k = str_of(r0->dict_key(i));
        if (k && layout.count(std::string(*k))) continue;
        view.set(root, view.copy(*first, r0->dict_key(i)), view.copy(*first, r0->dict_value(i)));
    }
    info.layout = "deepspeed-pipeline";
    info.world_size = count * dp;
    info.writer = "DeepSpeed " + version + ", pipeline (" + std::to_string(count) + " stages × " + std::to_string(dp) + " data-parallel), the layer files' weights";
    info.notes.push_back("the layer files hold the module's weights as saved; each stage's fp32 masters (its ZeRO partitions) are not merged");
    info.notes.push_back("names are <layer index>.<the layer's own name>, as the layer files hold them (PipelineModule.state_dict names a tied module tied_modules.<key>.…)");
    view.finish(root, "module");
}

}  // namespace ckpt
