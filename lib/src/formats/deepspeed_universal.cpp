// DeepSpeed's universal checkpoints (checkpoint/ds_to_universal.py): a tag folder that holds, beside
// copies of the original model-states files, one folder per trainable parameter,
//   TAG/zero/<name>/fp32.pt        {'param': the whole fp32 tensor, 'cat_dim': d} (ZeRO-1/2 sources;
//                                  + vocab_tensor, param_n_sub_params … for tensor-parallel ones), or
//                                  a bare 1-D tensor of the parameter's elements (ZeRO-3 sources)
//   TAG/zero/<name>/exp_avg.pt, exp_avg_sq.pt   Adam's moments, the same way; step.pt the step
//   TAG/zero/optimizer_state.pt    the optimizer's param_groups and the rest
// already joined over data (and tensor) parallel ranks and free of padding. deepspeed.cpp takes the
// rest (buffers, frozen parameters, tied names) from the model-states files.
#include <map>
#include <set>

#include "ckpt/error.hpp"
#include "formats/deepspeed_folder.hpp"
#include "formats/dist.hpp"
#include "model/contents.hpp"

namespace ckpt {

namespace {

using dist::field;
using dist::str_of;

// The tensor a universal state file holds, as a tensor of the view in `shape` (its elements in order).
Value* universal_tensor(DistView& view, const std::string& rel, const std::string& name, const std::vector<int64_t>& shape) {
    std::unique_ptr<Checkpoint> part = view.open_part(rel);
    view.c.dist->bytes += part->file_size();
    const Value* r = part->root();
    const Value* t = r && r->kind == ValueKind::tensor ? r : field(r, "param");
    if (!t || t->kind != ValueKind::tensor)
        throw Error(ErrorKind::format, part->path(), "holds no tensor (neither a `param` entry nor a bare tensor): not ds_to_universal.py's");
    if (const Value* st = field(r, "param_n_sub_params"); st && st->kind != ValueKind::none)
        throw Error(ErrorKind::unsupported, part->path(), name + " is made of sub-parameters (param_n_sub_params): not read yet");
    dist::Run run = view.run_of(*part, t->i(), name);
    const TensorInfo& ti = part->tensors()[t->i()];
    if (run.count != dist::numel(shape))
        throw Error(ErrorKind::corrupt, part->path(),
                    name + " is " + dist::shape_text(ti.shape) + " (" + std::to_string(run.count) + " elements), param_shapes says " + dist::shape_text(shape) +
                        ": not this model's parameter (a tensor-parallel source's local shape?)");
    size_t i = view.add_tensor(name, run.dtype, shape, {{run.file, run.offset, run.count * dtype_size(run.dtype), DType::untyped, DType::untyped}});
    return view.tensor(i);
}

}  // namespace

UniversalParams read_universal(DistView& view, const std::string& tagdir, const std::vector<std::pair<std::string, std::vector<int64_t>>>& shapes) {
    UniversalParams u;
    DistInfo& info = *view.c.dist;
    std::set<std::string> names;
    for (const auto& [name, shape] : shapes) names.insert(name);
    // Every folder under zero/ is a parameter of the model, and every trainable parameter has one.
    for (const std::string& n : dist::list_dir(tagdir + "/zero"))
        if (dist::is_dir(tagdir + "/zero/" + n) && !names.count(n))
            throw Error(ErrorKind::corrupt, tagdir + "/zero/" + n, "is not a trainable parameter of this model (param_shapes of the model states): another model's?");
    std::map<std::string, Value*> moments;
    for (const auto& [name, shape] : shapes) {
        std::string dir = "zero/" + name;
        if (!dist::is_file(tagdir + "/" + dir + "/fp32.pt"))
            throw Error(ErrorKind::corrupt, tagdir + "/" + dir + "/fp32.pt", "is missing: " + name + " is a trainable parameter (param_shapes)");
        u.params.emplace_back(name, universal_tensor(view, dir + "/fp32.pt", name, shape));
        info.files.push_back(dir + "/fp32.pt");
        for (const char* m : {"exp_avg", "exp_avg_sq"}) {
            std::string rel = dir + "/" + m + ".pt";
            if (!dist::is_file(tagdir + "/" + rel)) continue;
            Value*& d = moments[m];
            if (!d) d = view.dict(true);
            view.set(d, name, universal_tensor(view, rel, std::string("optimizer.state.") + m + "." + name, shape));
            info.files.push_back(rel);
            ++u.moment_files;
        }
    }
    if (!moments.empty()) {
        u.moments = view.dict(true);
        for (const auto& [m, d] : moments) view.set(u.moments, m, d);
    }
    return u;
}

void merge_universal(DistView& view, const std::string& tagdir, const Checkpoint& m0, const std::set<std::string>& buffer_names, bool zero3,
                     Ordered& sd, Value* root) {
    DistInfo& info = *view.c.dist;
    const Value* root0 = m0.root();
    const Value* module = field(root0, "module");
    Shapes declared;
    if (const Value* ps = field(root0, "param_shapes")) declared = param_shapes(ps, m0.path());
    std::vector<std::pair<std::string, std::vector<int64_t>>> trainable;
    for (const auto& g : declared) trainable.insert(trainable.end(), g.begin(), g.end());
    std::set<std::string> trainable_names, aliases;
    for (const auto& p : trainable) trainable_names.insert(p.first);
    const Value* shared = field(root0, "shared_params");
    if (shared && shared->kind == ValueKind::dict)
        for (size_t i = 0; i < shared->dict_size(); ++i)
            if (auto a = str_of(shared->dict_key(i))) aliases.insert(std::string(*a));
    const Value* frozen_shapes = field(root0, "frozen_param_shapes");
    bool frozen = frozen_shapes && frozen_shapes->kind == ValueKind::dict && frozen_shapes->dict_size() > 0;
    if (zero3 && frozen)
        throw Error(ErrorKind::unsupported, tagdir,
                    "is a universal checkpoint of a ZeRO-3 run with frozen parameters, which it leaves in every rank's fragments: not read yet");
    UniversalParams u = read_universal(view, tagdir, trainable);
    // Buffers and frozen parameters: the module's, as stored (ZeRO-1/2 keep them whole; universal
    // holds trainable parameters only), then the fp32 parameters, then tied names.
    for (size_t i = 0; i < module->dict_size(); ++i) {
        auto k = str_of(module->dict_key(i));
        const Value* v = module->dict_value(i);
        if (!k || v->kind != ValueKind::tensor || trainable_names.count(std::string(*k)) || aliases.count(std::string(*k))) continue;
        if (m0.tensors()[v->i()].numel == 0 && !buffer_names.count(std::string(*k)))
            throw Error(ErrorKind::corrupt, m0.path(), "holds a 0-element placeholder for " + std::string(*k) + ", which no zero/ folder holds");
        sd.set(std::string(*k), view.copy(m0, v));
    }
    for (auto& [name, v] : u.params) sd.set(name, v);
    tie_shared(shared, sd, info);
    if (u.moments) {
        view.set(root, "optimizer_moments", u.moments);
        info.notes.push_back("optimizer moments (" + std::to_string(u.moment_files) + " files of zero/) listed by name under optimizer_moments");
    }
}

}  // namespace ckpt
