// DeepSpeed's save_checkpoint folders opened as one merged state dict, the way DeepSpeed's own
// zero_to_fp32.py merges them (and with what it leaves out put back).
//
//   TOP/latest                                    the tag, as text ("global_step1000")
//   TOP/TAG/mp_rank_00_model_states.pt            ZeRO-1/2: module (16-bit weights when mixed precision),
//                                                 param_shapes, frozen_param_*, shared_params, buffer_names,
//                                                 dp_world_size, ds_version, global_steps, lr_scheduler …
//   TOP/TAG/zero_pp_rank_R_mp_rank_00_model_states.pt   ZeRO-3: the same per rank; module holds placeholders,
//                                                 frozen_param_fragments this rank's partitions
//   TOP/TAG/[bf16_]zero_pp_rank_R_mp_rank_00_optim_states.pt   per rank: optimizer_state_dict with
//       ZeRO-1/2: single_partition_of_fp32_groups[g] (this rank's part of group g, no padding),
//                 group_paddings, base_optimizer_state (Adam's exp_avg … of the padded part)
//       ZeRO-3:   fp32_flat_groups[g] (per parameter ceil(numel / ws) elements, padding kept),
//                 optimizer_state_dict (the base optimizer's, per sub-group)
//
// Merged: ZeRO-1/2 concatenate each group's parts over the ranks and cut it by param_shapes;
// ZeRO-3 take ceil(numel / ws) of every rank's flat vector per parameter, in turn, and cut to numel.
// In zero_to_fp32's order: buffers (cast to float32, as it does), frozen parameters, trainable ones
// (the fp32 masters), then tied names (shared_params) as the same tensor.
#include <map>
#include <set>
#include <unordered_map>

#include "ckpt/error.hpp"
#include "io/zip.hpp"
#include "formats/deepspeed_folder.hpp"
#include "formats/dist.hpp"
#include "formats/format.hpp"
#include "base/text_util.hpp"

namespace ckpt {

namespace {

using dist::field;
using dist::int_of;
using dist::str_of;

// ZeroStageEnum as pickled (getattr(ZeroStageEnum, 'gradients'), ZeroStageEnum(2)) or a plain int.
int zero_stage(const Value* v) {
    if (auto i = int_of(v)) return static_cast<int>(*i);
    std::string m = dist::enum_member(v);
    if (m == "disabled" || m == "0") return 0;
    if (m == "optimizer_states" || m == "1") return 1;
    if (m == "gradients" || m == "2") return 2;
    if (m == "weights" || m == "3") return 3;
    return -1;
}



uint64_t align_up(uint64_t x, uint64_t a) { return a ? (x + a - 1) / a * a : x; }

// An optimizer state entry of one partition: a flat vector per key (exp_avg …), or a value every
// parameter gets (step: a 0-d tensor as a run, or a number).
struct GroupState {
    std::vector<std::pair<std::string, dist::Flat>> flat;
    std::vector<std::pair<std::string, dist::Run>> scalar_tensors;  // rank 0's
    std::vector<std::pair<std::string, Value*>> scalars;             // rank 0's, copied into the view
    dist::Flat* find(const std::string& k) {
        for (auto& [name, f] : flat)
            if (name == k) return &f;
        return nullptr;
    }
};



// The torch optimizer state of one partition (this rank's part of each group): for every state key
// a 1-D tensor as long as the part (or its padded length: the first `lengths[g]` elements count).
void take_state(DistView& view, const Checkpoint& part, const Value* state, size_t g, uint64_t length, bool rank0,
                GroupState& gs, const std::string& file) {
    if (!state || state->kind != ValueKind::dict) return;
    for (size_t i = 0; i < state->dict_size(); ++i) {
        auto key = str_of(state->dict_key(i));
        const Value* v = state->dict_value(i);
        if (!key) continue;
        std::string what = file + ": optimizer state " + std::to_string(g) + "." + std::string(*key);
        if (v->kind == ValueKind::tensor && part.tensors()[v->i()].shape.size() == 1 && part.tensors()[v->i()].numel >= length &&
            length > 0) {
            dist::Run r = view.run_of(part, v->i(), what);
            r.count = length;
            dist::Flat* f = gs.find(std::string(*key));
            if (!f) {
                gs.flat.push_back({std::string(*key), {}});
                f = &gs.flat.back().second;
            }
            f->add(r);
        } else if (rank0 && v->kind == ValueKind::tensor && part.tensors()[v->i()].numel == 1) {
            gs.scalar_tensors.push_back({std::string(*key), view.run_of(part, v->i(), what)});
        } else if (rank0 && v->kind != ValueKind::tensor) {
            gs.scalars.push_back({std::string(*key), view.copy(part, v)});
        }
    }
}

}  // namespace


// shared_params (alias → the name it is tied to): each alias the same value as its name, or a note.
void tie_shared(const Value* shared, Ordered& sd, DistInfo& info) {
    if (!shared || shared->kind != ValueKind::dict) return;
    for (size_t i = 0; i < shared->dict_size(); ++i) {
        auto a = str_of(shared->dict_key(i)), b = str_of(shared->dict_value(i));
        if (!a || !b) continue;
        if (Value* v = sd.get(std::string(*b))) sd.set(std::string(*a), v);
        else info.notes.push_back("tied parameter " + std::string(*a) + " names " + std::string(*b) + ", which is not in the merged state dict");
    }
}

std::unique_ptr<Checkpoint> open_deepspeed(const std::string& given, const OpenOptions& options) {
    auto c = std::make_unique<Checkpoint::Contents>();
    c->path = given;
    c->dist = DistInfo{};
    DistInfo& info = *c->dist;
    std::string tagdir = deepspeed_tag_dir(given, options, info);
    info.dir = tagdir;
    DistView view(*c, options);

    if (deepspeed_pipeline_folder(tagdir)) {
        read_deepspeed_pipeline(view, tagdir);
        return std::make_unique<Checkpoint>(std::move(c));
    }
    DeepSpeedRankFiles files = deepspeed_rank_files(tagdir);
    if (files.optim_prefixes.size() > 1)
        throw Error(ErrorKind::corrupt, tagdir, "mixes bf16_zero_pp_rank_* and zero_pp_rank_* optimizer files: two runs wrote here");
    std::string model0 = !files.model.empty() ? files.model : files.model_ranks.count(0) ? files.model_ranks[0] : "";
    if (model0.empty())
        throw Error(ErrorKind::corrupt, tagdir,
                    files.model_ranks.empty() ? "has no mp_rank_00_model_states.pt (the module states)"
                                              : "has no zero_pp_rank_0_mp_rank_00_model_states.pt: rank 0's module states are missing");
    std::unique_ptr<Checkpoint> m0 = view.open_part(model0);
    info.files.push_back(model0);
    info.bytes += m0->file_size();
    const Value* root0 = m0->root();
    const Value* module = field(root0, "module");
    if (!module || module->kind != ValueKind::dict)
        throw Error(ErrorKind::format, m0->path(), "has no `module` state dict: not DeepSpeed's module states");
    std::string version = std::string(str_of(field(root0, "ds_version")).value_or("?"));
    std::optional<int64_t> dp = int_of(field(root0, "dp_world_size"));
    int ws = dp ? static_cast<int>(*dp) : static_cast<int>(files.optim.size());
    if (ws <= 0) throw Error(ErrorKind::corrupt, m0->path(), "dp_world_size is " + std::to_string(ws));
    info.world_size = ws;

    Value* root = view.dict();
    Value* sd_value = view.dict();
    view.set(root, "module", sd_value);
    Ordered sd;
    // The module's dtype: its parameters', not its buffers' (BatchNorm's stay float32 and int64).
    std::string module_dtype;
    std::set<std::string> buffer_names;
    if (const Value* b = field(root0, "buffer_names"); b && (b->kind == ValueKind::list || b->kind == ValueKind::tuple))
        for (const Value* x : b->items())
            if (auto n = str_of(x)) buffer_names.insert(std::string(*n));
    for (size_t i = 0; i < module->dict_size() && module_dtype.empty(); ++i) {
        auto k = str_of(module->dict_key(i));
        if (module->dict_value(i)->kind == ValueKind::tensor && !(k && buffer_names.count(std::string(*k))))
            module_dtype = std::string(dtype_name(m0->tensors()[module->dict_value(i)->i()].dtype));
    }

    auto keep_entries = [&]() {  // the rest of rank 0's module states: step counts, scheduler, client state
        static const std::set<std::string> layout = {"module", "optimizer", "param_shapes", "frozen_param_shapes",
                                                     "frozen_param_fragments", "shared_params", "buffer_names"};
        for (size_t i = 0; i < root0->dict_size(); ++i) {
            auto k = str_of(root0->dict_key(i));
            if (k && layout.count(std::string(*k))) continue;
            view.set(root, view.copy(*m0, root0->dict_key(i)), view.copy(*m0, root0->dict_value(i)));
        }
    };

    if (files.optim.empty() && dist::is_dir(tagdir + "/zero")) {  // a universal checkpoint: zero/<name>/fp32.pt per parameter
        merge_universal(view, tagdir, *m0, buffer_names, files.model.empty(), sd, root);
        for (auto& [name, v] : sd.items) view.set(sd_value, name, v);
        info.layout = "deepspeed-universal";
        info.writer = "DeepSpeed " + version + ", universal checkpoint (ds_to_universal.py; fp32 parameters, buffers and frozen ones from the module states" +
                      (module_dtype.empty() ? std::string(")") : ", " + module_dtype + ")");
        info.world_size = 1;
        keep_entries();
        view.finish(root, "module");
        return std::make_unique<Checkpoint>(std::move(c));
    }
    if (files.optim.empty()) {  // no ZeRO partitions: the module states hold the weights — unless they are placeholders
        // ZeRO-3's module states hold a 0-element placeholder for every parameter (the weights are
        // in the optimizer files), and so do the copies a universal checkpoint keeps of them: such a
        // folder without its optimizer files holds no weights at all, and is never merged as one.
        if (files.model.empty())
            throw Error(ErrorKind::corrupt, tagdir,
                        "holds ZeRO-3 module states (" + model0 + " …), whose parameters are 0-element placeholders, but none of the "
                        "optimizer files that hold the weights (" + std::string("zero_pp_rank_R_mp_rank_00_optim_states.pt for ranks 0–") +
                            std::to_string(ws - 1) + "): a partial copy? Every rank's optimizer file is needed");
        Shapes declared;
        if (const Value* ps = field(root0, "param_shapes")) declared = param_shapes(ps, m0->path());
        for (const auto& group : declared)
            for (const auto& [name, shape] : group) {
                uint64_t want = 1;
                for (int64_t d : shape) want *= static_cast<uint64_t>(std::max<int64_t>(d, 0));
                const Value* t = module->get(name);
                if (want && t && t->kind == ValueKind::tensor && m0->tensors()[t->i()].numel == 0)
                    throw Error(ErrorKind::corrupt, m0->path(),
                                "holds a 0-element placeholder for " + name + " (its param_shapes says " + std::to_string(want) +
                                    " elements): ZeRO-3 module states, whose weights are in optimizer files this folder does not have");
            }
        info.layout = "deepspeed";
        info.writer = "DeepSpeed " + version + ", no ZeRO partitions (the module states hold the weights" +
                      (module_dtype.empty() ? std::string(")") : ", " + module_dtype + ")");
        for (size_t i = 0; i < module->dict_size(); ++i) view.set(sd_value, view.copy(*m0, module->dict_key(i)), view.copy(*m0, module->dict_value(i)));
        keep_entries();
        view.finish(root, "module");
        return std::make_unique<Checkpoint>(std::move(c));
    }

    // Every rank's optimizer file is there, and only those.
    std::string prefix = *files.optim_prefixes.begin();
    for (int r = 0; r < ws; ++r)
        if (!files.optim.count(r))
            throw Error(ErrorKind::corrupt, tagdir + "/" + prefix + "zero_pp_rank_" + std::to_string(r) + "_mp_rank_00_optim_states.pt",
                        "is missing: rank " + std::to_string(r) + "'s optimizer states (dp_world_size is " + std::to_string(ws) + ")");
    if (files.optim.rbegin()->first >= ws)
        throw Error(ErrorKind::corrupt, tagdir + "/" + files.optim.rbegin()->second,
                    "is rank " + std::to_string(files.optim.rbegin()->first) + ", but " + model0 + " says dp_world_size " + std::to_string(ws) +
                        ": the files come from runs of different world sizes");

    Shapes shapes = param_shapes(field(root0, "param_shapes"), m0->path());
    auto frozen = named_shapes(field(root0, "frozen_param_shapes"), m0->path(), "frozen_param_shapes");
    int stage = -1;
    std::vector<dist::Flat> masters;      // ZeRO-1/2: per group, over the ranks; ZeRO-3: per rank, over the groups
    std::vector<GroupState> states;       // the same, for the optimizer state
    std::vector<std::vector<uint64_t>> part_len;  // ZeRO-1/2: [rank][group] elements, and the padding the rank declares
    std::vector<std::vector<int64_t>> part_pad;
    const Value* param_groups = nullptr;  // rank 0's, copied
    size_t state_groups = 0;
    std::vector<GroupState> sub_scalars;  // ZeRO-3: rank 0's step … per sub-group
    std::string optimizer_note;
    bool padding_kept = false, bf16_optimizer = false;
    for (int r = 0; r < ws; ++r) {
        const std::string& name = files.optim[r];
        std::unique_ptr<Checkpoint> part = view.open_part(name);
        info.files.push_back(name);
        info.bytes += part->file_size();
        const Value* osd = field(part->root(), "optimizer_state_dict");
        if (!osd) throw Error(ErrorKind::format, part->path(), "has no optimizer_state_dict: not DeepSpeed's optimizer states");
        const Value* zs = field(osd, "zero_stage");
        int s = zs ? zero_stage(zs) : field(osd, "single_partition_of_fp32_groups") ? 1 : -1;  // BF16_Optimizer writes no stage: ZeRO-1
        bf16_optimizer = bf16_optimizer || (!zs && s == 1);
        if (s < 0 && !zs)
            throw Error(ErrorKind::format, part->path(), "its optimizer_state_dict names no zero_stage: not DeepSpeed's optimizer states");
        if (s < 0) throw Error(ErrorKind::unsupported, part->path(), "names a ZeRO stage this reader does not know (" + repr(zs, 60) + ")");
        if (r == 0) stage = s;
        else if (s != stage)
            throw Error(ErrorKind::corrupt, part->path(), "is ZeRO stage " + std::to_string(s) + ", rank 0's is stage " + std::to_string(stage));
        if (const Value* pc = field(osd, "partition_count")) {
            std::vector<int64_t> counts = pc->kind == ValueKind::integer ? std::vector<int64_t>{pc->i()} : dist::ints_of(pc).value_or(std::vector<int64_t>{});
            for (int64_t n : counts)
                if (n != ws)
                    throw Error(ErrorKind::corrupt, part->path(),
                                "was partitioned over " + std::to_string(n) + " ranks, but dp_world_size is " + std::to_string(ws));
        }
        if (stage == 1 || stage == 2) {
            const Value* groups = field(osd, "single_partition_of_fp32_groups");
            if (!groups || groups->kind != ValueKind::list)
                throw Error(ErrorKind::corrupt, part->path(), "has no single_partition_of_fp32_groups (the fp32 master weights)");
            if (r == 0) {
                masters.resize(groups->items().size());
                states.resize(groups->items().size());
            } else if (groups->items().size() != masters.size())
                throw Error(ErrorKind::corrupt, part->path(),
                            "holds " + std::to_string(groups->items().size()) + " parameter groups, rank 0's holds " + std::to_string(masters.size()));
            std::vector<int64_t> pads = dist::ints_of(field(osd, "group_paddings")).value_or(std::vector<int64_t>{});
            part_len.emplace_back();
            part_pad.push_back(pads);
            const Value* base = field(osd, "base_optimizer_state");
            const Value* base_state = base && base->kind == ValueKind::dict ? field(base, "state") : nullptr;
            if (r == 0 && base && base->kind == ValueKind::dict) param_groups = view.copy(*part, field(base, "param_groups"));
            for (size_t g = 0; g < groups->items().size(); ++g) {
                const Value* t = groups->items()[g];
                std::string what = "single_partition_of_fp32_groups[" + std::to_string(g) + "]";
                if (t->kind != ValueKind::tensor) throw Error(ErrorKind::corrupt, part->path(), what + " is not a tensor");
                dist::Run run = view.run_of(*part, t->i(), what);
                // BF16_Optimizer saves each rank's partition whole (fp32_groups_flat_partition), the last
                // rank's with the group's padding at its end; ZeRO-1/2 save it without. Told apart by
                // the count: the parts then add up to the parameters plus that padding, exactly.
                if (r == ws - 1 && g < pads.size() && pads[g] > 0 && g < shapes.size()) {
                    uint64_t params = 0, before = 0, pad = static_cast<uint64_t>(pads[g]);
                    for (const auto& p : shapes[g]) params += dist::numel(p.second);
                    for (int q = 0; q < r; ++q) before += part_len[q][g];
                    if (pad <= run.count && before + run.count == params + pad) {
                        run.count -= pad;
                        padding_kept = true;
                    }
                }
                masters[g].add(run);
                part_len.back().push_back(run.count);
                const Value* gstate = nullptr;
                if (base_state && base_state->kind == ValueKind::dict)
                    for (size_t k = 0; k < base_state->dict_size(); ++k)
                        if (int_of(base_state->dict_key(k)) == static_cast<int64_t>(g)) gstate = base_state->dict_value(k);
                if (base && base->kind == ValueKind::list && g < base->items().size()) gstate = base->items()[g];  // elastic: lean per group
                take_state(view, *part, gstate, g, run.count, r == 0, states[g], name);
            }
        } else if (stage == 3) {
            const Value* groups = field(osd, "fp32_flat_groups");
            if (!groups || groups->kind != ValueKind::list)
                throw Error(ErrorKind::corrupt, part->path(), "has no fp32_flat_groups (the fp32 master weights)");
            masters.emplace_back();
            states.emplace_back();
            const Value* inner = field(osd, "optimizer_state_dict");
            const Value* inner_state = field(inner, "state");
            if (r == 0) {
                param_groups = view.copy(*part, field(inner, "param_groups"));
                state_groups = groups->items().size();
            }
            for (size_t g = 0; g < groups->items().size(); ++g) {
                const Value* t = groups->items()[g];
                std::string what = "fp32_flat_groups[" + std::to_string(g) + "]";
                if (t->kind != ValueKind::tensor) throw Error(ErrorKind::corrupt, part->path(), what + " is not a tensor");
                dist::Run run = view.run_of(*part, t->i(), what);
                masters.back().add(run);
                const Value* gstate = nullptr;
                if (inner_state && inner_state->kind == ValueKind::dict)
                    for (size_t k = 0; k < inner_state->dict_size(); ++k)
                        if (int_of(inner_state->dict_key(k)) == static_cast<int64_t>(g)) gstate = inner_state->dict_value(k);
                GroupState one;
                take_state(view, *part, gstate, g, run.count, r == 0, one, name);
                for (auto& [k, f] : one.flat) {
                    dist::Flat* into = states.back().find(k);
                    if (!into) {
                        states.back().flat.push_back({k, {}});
                        into = &states.back().flat.back().second;
                    }
                    for (const dist::Run& x : f.runs) into->add(x);
                }
                if (r == 0) sub_scalars.push_back({{}, one.scalar_tensors, one.scalars});
            }
        } else {
            throw Error(ErrorKind::unsupported, part->path(), "is ZeRO stage " + std::to_string(stage) + ": no partitions to merge");
        }
    }
    info.layout = "deepspeed-zero" + std::to_string(stage);
    std::string master_dtype = masters.empty() || masters.front().runs.empty() ? "float32" : std::string(dtype_name(masters.front().runs.front().dtype));
    info.writer = "DeepSpeed " + version + (bf16_optimizer ? ", BF16_Optimizer (ZeRO-1 partitions, " : ", ZeRO-" + std::to_string(stage) + " (") +
                  (prefix == "bf16_" && !bf16_optimizer ? "bf16 optimizer, " : "") +
                  (module_dtype.empty() ? std::string() : "module " + module_dtype + ", ") + master_dtype + " masters)";
    if (stage != 3) info.module_states = model0;
    if (padding_kept) info.notes.push_back("the last rank's fp32 partition holds the alignment padding (BF16_Optimizer saves it whole): dropped");

    // Buffers first, as zero_to_fp32 puts them, cast as it casts them (`.float()`).
    for (size_t i = 0; i < module->dict_size(); ++i) {
        auto k = str_of(module->dict_key(i));
        if (k && buffer_names.count(std::string(*k)) && module->dict_value(i)->kind == ValueKind::tensor)
            sd.set(std::string(*k), view.copy(*m0, module->dict_value(i), DType::float32));
    }
    // Frozen parameters: rank 0's fragments (ZeRO-2), every rank's parts (ZeRO-3), or under ZeRO-1,
    // which saves no fragments, the module's own tensors (zero_to_fp32 leaves them out).
    const Value* fragments = field(root0, "frozen_param_fragments");
    if (stage == 3) {  // every rank's module states: the same parameters, and their frozen parts
        std::vector<dist::Flat> frozen_parts(frozen.size());
        for (int r = 0; r < ws; ++r) {
            auto it = files.model_ranks.find(r);
            if (it == files.model_ranks.end())
                throw Error(ErrorKind::corrupt, tagdir + "/zero_pp_rank_" + std::to_string(r) + "_mp_rank_00_model_states.pt",
                            "is missing: rank " + std::to_string(r) + "'s module states");
            std::unique_ptr<Checkpoint> own;
            const Checkpoint* mr = m0.get();
            if (r != 0) {
                own = view.open_part(it->second);
                info.files.push_back(it->second);
                info.bytes += own->file_size();
                mr = own.get();
                if (param_shapes(field(mr->root(), "param_shapes"), mr->path()) != shapes)
                    throw Error(ErrorKind::corrupt, mr->path(), "lists other parameters (param_shapes) than " + model0);
                if (int_of(field(mr->root(), "dp_world_size")).value_or(ws) != ws)
                    throw Error(ErrorKind::corrupt, mr->path(), "says another dp_world_size than " + model0);
            }
            const Value* frags = field(mr->root(), "frozen_param_fragments");
            for (size_t p = 0; p < frozen.size(); ++p) {
                const Value* t = frags && frags->kind == ValueKind::dict ? frags->get(frozen[p].first) : nullptr;
                if (!t || t->kind != ValueKind::tensor)
                    throw Error(ErrorKind::corrupt, mr->path(), "has no part of frozen parameter " + frozen[p].first);
                frozen_parts[p].add(view.run_of(*mr, t->i(), "frozen_param_fragments[" + frozen[p].first + "]"));
            }
        }
        if (files.model_ranks.rbegin()->first >= ws)
            throw Error(ErrorKind::corrupt, tagdir + "/" + files.model_ranks.rbegin()->second,
                        "is a rank past dp_world_size " + std::to_string(ws));
        for (size_t p = 0; p < frozen.size(); ++p) {
            const auto& [name, shape] = frozen[p];
            uint64_t n = dist::numel(shape);
            DType dt = frozen_parts[p].runs.empty() ? DType::float32 : frozen_parts[p].runs.front().dtype;
            sd.set(name, view.tensor(view.add_tensor(name, dt, shape, frozen_parts[p].slice(0, n, DType::untyped, name))));
        }
    } else {
        bool from_module = !frozen.empty() && (!fragments || fragments->kind != ValueKind::dict);
        if (frozen.empty()) {  // ZeRO-1 records no frozen_param_shapes: what the module holds besides the rest
            std::set<std::string> known(buffer_names.begin(), buffer_names.end());
            for (const auto& g : shapes)
                for (const auto& p : g) known.insert(p.first);
            if (const Value* shared = field(root0, "shared_params"); shared && shared->kind == ValueKind::dict)
                for (size_t i = 0; i < shared->dict_size(); ++i)
                    if (auto a = str_of(shared->dict_key(i))) known.insert(std::string(*a));
            for (size_t i = 0; i < module->dict_size(); ++i) {
                auto k = str_of(module->dict_key(i));
                if (k && !known.count(std::string(*k)) && module->dict_value(i)->kind == ValueKind::tensor)
                    frozen.emplace_back(std::string(*k), m0->tensors()[module->dict_value(i)->i()].shape);
            }
            from_module = !frozen.empty();
        }
        for (const auto& [name, shape] : frozen) {
            const Value* t = from_module ? module->get(name) : fragments->get(name);
            if (!t || t->kind != ValueKind::tensor)
                throw Error(ErrorKind::corrupt, m0->path(), "has no tensor for frozen parameter " + name);
            if (m0->tensors()[t->i()].shape != shape)
                throw Error(ErrorKind::corrupt, m0->path(), "frozen parameter " + name + " is " + dist::shape_text(m0->tensors()[t->i()].shape) +
                                                                 ", frozen_param_shapes says " + dist::shape_text(shape));
            sd.set(name, view.copy(*m0, t));
        }
        if (from_module)
            info.notes.push_back(std::to_string(frozen.size()) + (frozen.size() == 1 ? " frozen parameter" : " frozen parameters") +
                                 " taken from the module states, as stored (ZeRO-1 saves no fp32 copy of them; zero_to_fp32 leaves them out)");
    }

    // Trainable parameters: the fp32 masters, cut by param_shapes.
    struct Param {
        std::string name;
        std::vector<int64_t> shape;
        size_t group;
        uint64_t offset = 0;  // in its group's flat vector (ZeRO-1/2), in every rank's (ZeRO-3)
    };
    std::vector<Param> params;
    if (stage == 1 || stage == 2) {
        if (shapes.size() != masters.size())
            throw Error(ErrorKind::corrupt, m0->path(),
                        "lists " + std::to_string(shapes.size()) + " parameter groups, the optimizer files hold " + std::to_string(masters.size()));
        for (size_t g = 0; g < shapes.size(); ++g) {
            uint64_t off = 0;
            for (const auto& [name, shape] : shapes[g]) {
                uint64_t n = dist::numel(shape);
                sd.set(name, view.tensor(view.add_tensor(name, masters[g].runs.empty() ? DType::float32 : masters[g].runs.front().dtype, shape,
                                                         masters[g].slice(off, n, DType::untyped, name))));
                params.push_back({name, shape, g, off});
                info.masters.push_back(name);
                off += n;
            }
            uint64_t align = 2 * static_cast<uint64_t>(ws);
            // zero_to_fp32 allows the two to differ within the alignment; DeepSpeed pads only after
            // the group's last element, so its parts without padding hold exactly the parameters.
            if (off != masters[g].count)
                throw Error(ErrorKind::corrupt, tagdir,
                            "parameter group " + std::to_string(g) + ": the ranks' fp32 parts hold " + std::to_string(masters[g].count) +
                                " elements, its parameters (param_shapes of " + model0 + ") " + std::to_string(off) +
                                ": the optimizer and module states are of different models");
            // Every rank's part plus its padding is one partition size; padding only at the end.
            uint64_t partition = 0;
            for (int r = 0; r < ws; ++r) {
                int64_t pad = g < part_pad[r].size() ? part_pad[r][g] : 0;
                uint64_t whole = part_len[r][g] + static_cast<uint64_t>(pad);
                if (r == 0) partition = whole;
                else if (whole != partition)
                    c->problems.push_back({"partition_size", files.optim[r],
                                             files.optim[r] + ": group " + std::to_string(g) + " holds " + std::to_string(part_len[r][g]) +
                                                 " elements and " + std::to_string(pad) + " of padding, rank 0's partition is " +
                                                 std::to_string(partition)});
            }
            if (partition * static_cast<uint64_t>(ws) != align_up(off, align))
                c->problems.push_back({"partition_padding", tagdir,
                                         "parameter group " + std::to_string(g) + ": " + std::to_string(ws) + " partitions of " +
                                             std::to_string(partition) + " elements for " + std::to_string(off) +
                                             " elements, the layout pads to a multiple of " + std::to_string(align) + " (" +
                                             std::to_string(align_up(off, align)) + ")"});
        }
    } else {
        uint64_t off = 0;
        for (size_t g = 0; g < shapes.size(); ++g)
            for (const auto& [name, shape] : shapes[g]) {
                uint64_t n = dist::numel(shape), per = (n + ws - 1) / ws;
                std::vector<RecordPiece> pieces;
                for (int r = 0; r < ws; ++r) {
                    uint64_t done = per * static_cast<uint64_t>(r), take = done >= n ? 0 : std::min(per, n - done);
                    auto some = masters[r].slice(off, take, DType::untyped, name + " (rank " + std::to_string(r) + ")");
                    pieces.insert(pieces.end(), some.begin(), some.end());
                }
                if (off + per > masters.front().count)  // every rank holds `per` of it, padding included
                    throw Error(ErrorKind::corrupt, tagdir + "/" + files.optim[0],
                                "fp32_flat_groups hold " + std::to_string(masters.front().count) + " elements, the parameters up to " + name +
                                    " need " + std::to_string(off + per));
                DType dt = masters.front().runs.empty() ? DType::float32 : masters.front().runs.front().dtype;
                sd.set(name, view.tensor(view.add_tensor(name, dt, shape, std::move(pieces))));
                params.push_back({name, shape, g, off});
                off += per;
            }
        for (int r = 0; r < ws; ++r)
            if (masters[r].count != off)
                throw Error(ErrorKind::corrupt, tagdir + "/" + files.optim[r],
                            "fp32_flat_groups hold " + std::to_string(masters[r].count) + " elements, the parameters' partitions " +
                                std::to_string(off) + " (ceil(numel / " + std::to_string(ws) + ") each)");
    }

    // Tied names: the same tensor as the one they are tied to (only rank 0's module states list them).
    tie_shared(field(root0, "shared_params"), sd, info);
    for (auto& [name, v] : sd.items) view.set(sd_value, name, v);

    // The optimizer state in torch's layout: state per parameter index, param_groups naming them.
    bool per_group = stage != 3 || state_groups == shapes.size();
    if (!states.empty() && !states.front().flat.empty() && per_group) {
        Value* opt = view.dict();
        Value* state = view.dict();
        view.set(opt, "state", state);
        for (size_t p = 0; p < params.size(); ++p) {
            const Param& pa = params[p];
            GroupState& gs = stage == 3 ? states.front() : states[pa.group];
            const GroupState& sc = stage == 3 ? sub_scalars.at(pa.group) : gs;
            Value* ps = view.dict();
            std::string base = "optimizer.state." + std::to_string(p) + ".";
            uint64_t n = dist::numel(pa.shape);
            for (const auto& [k, run] : sc.scalar_tensors) {
                dist::Flat one;
                one.add(run);
                view.set(ps, k, view.tensor(view.add_tensor(base + k, run.dtype, {}, one.slice(0, 1, DType::untyped, base + k))));
            }
            for (const auto& [k, v] : sc.scalars) view.set(ps, k, v);
            for (auto& [k, f] : gs.flat) {
                std::vector<RecordPiece> pieces;
                if (stage == 3) {
                    uint64_t per = (n + ws - 1) / ws;
                    for (int r = 0; r < ws; ++r) {
                        dist::Flat* fr = states[r].find(k);
                        if (!fr) throw Error(ErrorKind::corrupt, tagdir + "/" + files.optim[r], "has no optimizer state " + k);
                        uint64_t done = per * static_cast<uint64_t>(r), take = done >= n ? 0 : std::min(per, n - done);
                        auto some = fr->slice(pa.offset, take, DType::untyped, base + k);
                        pieces.insert(pieces.end(), some.begin(), some.end());
                    }
                } else {
                    pieces = f.slice(pa.offset, n, DType::untyped, base + k);
                }
                DType dt = f.runs.empty() ? DType::float32 : f.runs.front().dtype;
                view.set(ps, k, view.tensor(view.add_tensor(base + k, dt, pa.shape, std::move(pieces))));
            }
            view.set(state, view.integer(static_cast<int64_t>(p)), ps);
        }
        // param_groups: rank 0's hyperparameters, each naming its parameters' indices.
        Value* groups = view.list();
        size_t next = 0;
        for (size_t g = 0; g < shapes.size(); ++g) {
            const Value* src = param_groups && param_groups->kind == ValueKind::list && g < param_groups->items().size() ? param_groups->items()[g] : nullptr;
            Value* grp = view.dict();
            if (src && src->kind == ValueKind::dict)
                for (size_t i = 0; i < src->dict_size(); ++i)
                    if (str_of(src->dict_key(i)) != std::optional<std::string_view>("params")) view.set(grp, src->dict_key(i), src->dict_value(i));
            Value* ids = view.list();
            for (size_t k = 0; k < shapes[g].size(); ++k) c->arena.append_item(ids, view.integer(static_cast<int64_t>(next++)));
            view.set(grp, "params", ids);
            c->arena.append_item(groups, grp);
        }
        view.set(opt, "param_groups", groups);
        view.set(root, "optimizer", opt);
    } else if (!states.empty() && !states.front().flat.empty()) {
        info.notes.push_back("optimizer state not given per parameter: ZeRO-3 split the " + std::to_string(shapes.size()) +
                             " parameter groups into " + std::to_string(state_groups) +
                             " sub-groups (sub_group_size), and which parameters each held is not saved");
    }
    keep_entries();
    view.finish(root, "module");
    std::set<size_t> counted;  // a tied name is one tensor
    for (const auto& e : c->state_dict.entries)
        if (counted.insert(*c->entries[e.entry].tensor).second) info.elements += c->tensors[*c->entries[e.entry].tensor].numel;
    return std::make_unique<Checkpoint>(std::move(c));
}

}  // namespace ckpt
