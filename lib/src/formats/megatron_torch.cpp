// Megatron-LM's --ckpt-format torch: one torch.save per model-parallel rank,
// iter_N/mp_rank_TT[_PPP][_EEE]/model_optim_rng.pt, joined into the state dict of a TP=1 / PP=1 run.
//
// Tensor-parallel pieces are joined by Megatron's rules (tensor_parallel/layers.py): dim 0 for the
// vocabulary-parallel embedding and output layer and the column-parallel linears (fused QKV grouped
// by query group, so the pieces are already in order; SwiGLU's fc1 holds [W_r; V_r] on each rank, so
// the W halves come first, then the V halves), dim 1 for the row-parallel linears; norms, the
// row-parallel biases, position embeddings and the router are replicated (rank 0's is taken, and
// verify compares every copy). A tensor no rule covers is refused when it is split: the files do not
// say along which dimension.
#include <algorithm>
#include <map>
#include <regex>
#include <set>

#include "base/text_util.hpp"
#include "ckpt/error.hpp"
#include "formats/dist.hpp"
#include "formats/megatron.hpp"
#include "model/contents.hpp"

namespace ckpt::megatron {

namespace {

using dist::field;
using dist::int_of;
using dist::str_of;

// How tensor parallelism split a parameter, from its name (Megatron-Core and the legacy models).
enum class Split { replicated, dim0, dim1, swiglu, unknown };

Split split_of(const std::string& name, bool swiglu) {
    std::string n = name;
    if (auto e = expert_number(n); e.first != std::string::npos && n.find(".experts.linear_fc") != std::string::npos)
        n = n.substr(0, e.first);  // linear_fc1.weight3 → linear_fc1.weight
    auto ends = [&](std::string_view s) { return n == s || text::ends_with(n, std::string(".") + std::string(s)); };
    if (ends("word_embeddings.weight") || ends("output_layer.weight")) return Split::dim0;
    if (ends("linear_fc1.weight") || ends("linear_fc1.bias") || ends("dense_h_to_4h.weight") || ends("dense_h_to_4h.bias"))
        return swiglu ? Split::swiglu : Split::dim0;
    if (ends("linear_qkv.weight") || ends("linear_qkv.bias") || ends("query_key_value.weight") || ends("query_key_value.bias"))
        return Split::dim0;
    if (ends("linear_proj.weight") || ends("linear_fc2.weight") || ends("self_attention.dense.weight") || ends("dense_4h_to_h.weight"))
        return Split::dim1;
    if (ends("linear_proj.bias") || ends("linear_fc2.bias") || ends("self_attention.dense.bias") || ends("dense_4h_to_h.bias")) return Split::replicated;
    if (ends("position_embeddings.weight") || ends("router.weight") || ends("router.expert_bias")) return Split::replicated;
    // Norms: input_layernorm, pre_mlp_layernorm, final_layernorm, q_layernorm, linear_qkv.layer_norm_weight …
    size_t dot = n.rfind('.');
    std::string module = dot == std::string::npos ? n : n.substr(0, dot);
    std::string last = module.substr(module.rfind('.') == std::string::npos ? 0 : module.rfind('.') + 1);
    std::string leaf = dot == std::string::npos ? n : n.substr(dot + 1);
    if (last.find("norm") != std::string::npos || leaf.find("norm") != std::string::npos) return Split::replicated;
    return Split::unknown;
}

// Every (name, value) of a model chunk's state dict, nested dicts joined with '.'.
void flatten(const Value* d, const std::string& prefix, std::vector<std::pair<std::string, const Value*>>& out, int depth) {
    if (depth > 64) throw Error(ErrorKind::limit, "", "model state dict nested deeper than 64 levels");
    for (size_t i = 0; i < d->dict_size(); ++i) {
        auto k = str_of(d->dict_key(i));
        if (!k) continue;
        std::string name = prefix.empty() ? std::string(*k) : prefix + "." + std::string(*k);
        const Value* v = d->dict_value(i);
        if (v && v->kind == ValueKind::dict) flatten(v, name, out, depth + 1);
        else out.emplace_back(std::move(name), v);
    }
}

std::string rank_name(int tp, int pp, int ep, const DistInfo::Degrees& d) {
    char b[64];
    std::string s;
    std::snprintf(b, sizeof b, "mp_rank_%02d", tp);
    s = b;
    if (d.pipeline > 1) {
        std::snprintf(b, sizeof b, "_%03d", pp);
        s += b;
    }
    if (d.expert > 1) {
        std::snprintf(b, sizeof b, "_%03d", ep);
        s += b;
    }
    return s;
}


}  // namespace

void add_chunk(RankFile& f, const Value* m) {
    if (m->kind != ValueKind::dict) throw Error(ErrorKind::format, f.part->path(), "its model is " + repr(m, 40) + ", not a state dict");
    f.chunks.emplace_back();
    naming_file(f.part->path(), [&] { flatten(m, "", f.chunks.back(), 0); });
    f.by_name.emplace_back(f.chunks.back().begin(), f.chunks.back().end());
}

// The chunks of every rank file joined into `model`: layers and experts renumbered, tensor-parallel
// pieces joined by Megatron's rules, replicas and the tied copy listed for verify.
void join_rank_files(DistView& view, const std::string& dir, Value* model, RankFiles& set) {
    DistInfo& info = *view.c.dist;
    const Args& args = set.args;
    DistInfo::Degrees& d = set.d;
    std::vector<RankFile>& files = set.files;
    const std::string& first_path = set.first_path;
    bool swiglu = args.b("swiglu");
    bool tied = field(args.v, "untie_embeddings_and_output_weights") && !args.b("untie_embeddings_and_output_weights");
    int etp = static_cast<int>(args.i("expert_tensor_parallel_size", d.tensor));
    int64_t num_experts = args.i("num_experts", 0);
    if (num_experts > 0 && num_experts % d.expert)
        throw Error(ErrorKind::corrupt, first_path, "args says " + std::to_string(num_experts) + " experts over " + std::to_string(d.expert) +
                                                        " expert-parallel ranks: not a whole number per rank");
    int64_t local_experts = num_experts > 0 ? num_experts / d.expert : 0;
    auto at = [&](int tp, int pp, int ep) -> RankFile& { return files[(static_cast<size_t>(pp) * d.expert + ep) * d.tensor + tp]; };

    // Global layer offsets: chunks in the order the model runs them (virtual stage, then pipeline stage),
    // each holding layers 0 … n-1 of its own.
    std::map<std::pair<int, int>, int64_t> offset;  // (vp, pp) → first global layer
    int64_t layers = 0;
    for (int vp = 0; vp < d.virtual_pipeline; ++vp)
        for (int pp = 0; pp < d.pipeline; ++pp) {
            std::set<int64_t> local;
            for (const auto& [name, v] : at(0, pp, 0).chunks[vp]) {
                auto ln = layer_number(name);
                if (ln.first != std::string::npos) local.insert(std::stoll(name.substr(ln.first, ln.second)));
            }
            if (!local.empty() && (*local.begin() != 0 || *local.rbegin() != static_cast<int64_t>(local.size()) - 1))
                throw Error(ErrorKind::corrupt, at(0, pp, 0).part->path(),
                            "its layers are numbered " + std::to_string(*local.begin()) + ".." + std::to_string(*local.rbegin()) + " with gaps: not a chunk's own numbering");
            offset[{vp, pp}] = layers;
            layers += static_cast<int64_t>(local.size());
        }
    if (auto nl = args.i("num_layers"); nl && *nl != layers)
        throw Error(ErrorKind::corrupt, dir, "the rank files hold " + std::to_string(layers) + " layers, args says num_layers " + std::to_string(*nl));

    // The joined vocabulary-parallel tensors (word embeddings, output layer): their pieces for the
    // tied copy, their shapes against padded_vocab_size.
    auto vocab_parallel = [](const std::string& n) { return text::ends_with(n, "word_embeddings.weight") || text::ends_with(n, "output_layer.weight"); };
    std::map<std::string, std::pair<std::vector<RecordPiece>, std::vector<int64_t>>> merged;
    std::set<std::string> seen;
    auto emit_value = [&](const std::string& name, Value* v) {
        if (!seen.insert(name).second) throw Error(ErrorKind::corrupt, dir, "two rank files give " + name + " (after renumbering layers and experts)");
        view.set(model, name, v);
    };
    std::vector<RecordPiece> tied_copy;
    std::string tied_where, tied_name;
    DType tied_dtype = DType::untyped;
    for (int vp = 0; vp < d.virtual_pipeline; ++vp)
        for (int pp = 0; pp < d.pipeline; ++pp)
            for (int ep = 0; ep < d.expert; ++ep) {
                RankFile& f0 = at(0, pp, ep);
                // Each TP rank holds the same names (a name twice in one file counts once).
                for (int tp = 0; tp < d.tensor; ++tp) {
                    const auto& names = at(tp, pp, ep).by_name[vp];
                    if (names.size() != f0.chunks[vp].size() || names.size() != f0.by_name[vp].size())
                        throw Error(ErrorKind::corrupt, at(tp, pp, ep).part->path(),
                                    "holds " + std::to_string(names.size()) + " model entries, " + f0.rel + " " +
                                        std::to_string(f0.chunks[vp].size()) + ": the tensor-parallel ranks disagree");
                }
                for (const auto& [name, v0] : f0.chunks[vp]) {
                    std::string global = name;
                    if (auto ln = layer_number(name); ln.first != std::string::npos)
                        global = renumbered(name, ln, std::stoll(name.substr(ln.first, ln.second)) + offset[{vp, pp}]);
                    auto ex = expert_number(global);
                    bool expert = ex.first != std::string::npos;
                    if (expert) global = renumbered(global, ex, std::stoll(global.substr(ex.first, ex.second)) + static_cast<int64_t>(ep) * local_experts);
                    if (ep > 0 && !expert) continue;  // the same on every expert-parallel rank: ep 0's is taken
                    std::vector<const Value*> vals;
                    for (int tp = 0; tp < d.tensor; ++tp) {
                        const auto& names = at(tp, pp, ep).by_name[vp];
                        auto it = names.find(name);
                        if (it == names.end())
                            throw Error(ErrorKind::corrupt, at(tp, pp, ep).part->path(), "has no " + name + ", which " + f0.rel + " holds");
                        vals.push_back(it->second);
                    }
                    // Values, and TransformerEngine's _extra_state (its pickled FP8 scaling state, a uint8
                    // tensor each rank keeps for itself): rank 0's, as Megatron's own TP=1 re-save keeps one.
                    if (!v0 || v0->kind != ValueKind::tensor || text::ends_with(name, "._extra_state")) {
                        emit_value(global, view.copy(*f0.part, v0));
                        continue;
                    }
                    if (tied && d.pipeline > 1 && pp == d.pipeline - 1 && (global == "output_layer.weight" || text::ends_with(global, ".output_layer.weight"))) {
                        // The last stage's copy of the tied embedding: a TP=1/PP=1 save has none.
                        tied_where = f0.rel;
                        tied_name = global;
                        tied_dtype = f0.part->tensors()[v0->i()].dtype;
                        std::vector<dist::Run> runs;
                        for (int tp = 0; tp < d.tensor; ++tp) runs.push_back(view.run_of(*at(tp, pp, ep).part, vals[tp]->i(), name));
                        for (const dist::Run& r : runs) tied_copy.push_back({r.file, r.offset, r.count * dtype_size(r.dtype), DType::untyped, DType::untyped});
                        continue;
                    }
                    int ranks = expert ? etp : d.tensor;
                    if (expert && etp != d.tensor && etp != 1)
                        throw Error(ErrorKind::unsupported, f0.part->path(),
                                    "expert tensor parallelism " + std::to_string(etp) + " differs from tensor parallelism " + std::to_string(d.tensor) + ": not read yet");
                    if (ranks == 1 || d.tensor == 1) {
                        emit_value(global, view.copy(*f0.part, v0));
                        continue;
                    }
                    Split split = split_of(global, swiglu);
                    const TensorInfo& t0 = f0.part->tensors()[v0->i()];
                    std::vector<dist::Run> runs;
                    std::vector<std::vector<int64_t>> shapes;
                    for (int tp = 0; tp < d.tensor; ++tp) {
                        const Checkpoint& p = *at(tp, pp, ep).part;
                        const TensorInfo& t = p.tensors()[vals[tp]->i()];
                        if (t.dtype != t0.dtype || t.shape != t0.shape)
                            throw Error(ErrorKind::corrupt, p.path(),
                                        name + " is " + std::string(dtype_name(t.dtype)) + " " + dist::shape_text(t.shape) + ", " + f0.rel + " has " +
                                            std::string(dtype_name(t0.dtype)) + " " + dist::shape_text(t0.shape) + ": tensor-parallel pieces differ");
                        runs.push_back(view.run_of(p, vals[tp]->i(), name));
                        shapes.push_back(t.shape);
                    }
                    uint64_t esz = dtype_size(t0.dtype);
                    if (split == Split::unknown)
                        throw Error(ErrorKind::unsupported, f0.part->path(),
                                    name + " " + dist::shape_text(t0.shape) + " is on every tensor-parallel rank and no rule of Megatron's says whether it is split "
                                           "or replicated (and along which dimension): not merged rather than guessed");
                    if (split == Split::replicated) {
                        emit_value(global, view.copy(*f0.part, v0));
                        DistInfo::Replica rep;
                        rep.name = global;
                        rep.size = t0.numel * esz;
                        rep.dtype = t0.dtype;
                        for (int tp = 0; tp < d.tensor; ++tp) {
                            rep.where.push_back(at(tp, pp, ep).rel);
                            rep.copies.push_back({{runs[tp].file, runs[tp].offset, rep.size, DType::untyped, DType::untyped}});
                        }
                        info.replicas.push_back(std::move(rep));
                        continue;
                    }
                    std::vector<int64_t> shape = t0.shape;
                    std::vector<RecordPiece> pieces;
                    if (split == Split::swiglu) {
                        if (shape.empty() || shape[0] % 2)
                            throw Error(ErrorKind::corrupt, f0.part->path(), name + " " + dist::shape_text(shape) + " has no two halves (SwiGLU's W and V)");
                        uint64_t half = t0.numel / 2 * esz;
                        for (int h = 0; h < 2; ++h)
                            for (const dist::Run& r : runs) pieces.push_back({r.file, r.offset + h * half, half, DType::untyped, DType::untyped});
                        shape[0] *= d.tensor;
                    } else {
                        size_t dim = split == Split::dim0 ? 0 : 1;
                        if (shape.size() <= dim)
                            throw Error(ErrorKind::corrupt, f0.part->path(), name + " " + dist::shape_text(shape) + " has no dimension " + std::to_string(dim) + " to join on");
                        uint64_t outer = 1, inner = 1;
                        for (size_t k = 0; k < dim; ++k) outer *= static_cast<uint64_t>(shape[k]);
                        for (size_t k = dim; k < shape.size(); ++k) inner *= static_cast<uint64_t>(shape[k]);
                        for (uint64_t o = 0; o < outer; ++o)
                            for (const dist::Run& r : runs) pieces.push_back({r.file, r.offset + o * inner * esz, inner * esz, DType::untyped, DType::untyped});
                        shape[dim] *= d.tensor;
                    }
                    pieces = joined(std::move(pieces));
                    if (vocab_parallel(global)) merged[global] = {pieces, shape};
                    emit_value(global, view.tensor(view.add_tensor(global, t0.dtype, shape, std::move(pieces))));
                }
                // The non-expert tensors of the other expert-parallel ranks: copies of ep 0's.
                if (ep == 0) continue;
                for (const auto& [name, v] : f0.chunks[vp]) {
                    if (!v || v->kind != ValueKind::tensor || expert_number(name).first != std::string::npos) continue;
                    for (int tp = 0; tp < d.tensor; ++tp) {
                        const Checkpoint& p0 = *at(tp, pp, 0).part;
                        const Checkpoint& p = *at(tp, pp, ep).part;
                        auto wi = at(tp, pp, 0).by_name[vp].find(name), xi = at(tp, pp, ep).by_name[vp].find(name);
                        const Value* w = wi == at(tp, pp, 0).by_name[vp].end() ? nullptr : wi->second;
                        const Value* x = xi == at(tp, pp, ep).by_name[vp].end() ? nullptr : xi->second;
                        if (!w || !x || w->kind != ValueKind::tensor || x->kind != ValueKind::tensor) continue;
                        dist::Run a = view.run_of(p0, w->i(), name), b = view.run_of(p, x->i(), name);
                        if (a.count != b.count || a.dtype != b.dtype)
                            throw Error(ErrorKind::corrupt, p.path(), name + " differs in shape from " + at(tp, pp, 0).rel + "'s: expert-parallel ranks disagree");
                        DistInfo::Replica rep;
                        rep.name = name + " (tensor-parallel rank " + std::to_string(tp) + ")";
                        rep.size = a.count * dtype_size(a.dtype);
                        rep.dtype = a.dtype;
                        rep.where = {at(tp, pp, 0).rel, at(tp, pp, ep).rel};
                        rep.copies = {{{a.file, a.offset, rep.size, DType::untyped, DType::untyped}}, {{b.file, b.offset, rep.size, DType::untyped, DType::untyped}}};
                        info.replicas.push_back(std::move(rep));
                    }
                }
            }
    if (!tied_copy.empty()) {
        auto emb = std::find_if(merged.begin(), merged.end(), [](const auto& m) {  // Megatron-Core's, legacy's or NeMo's (model.…)
            return m.first == "embedding.word_embeddings.weight" || text::ends_with(m.first, ".embedding.word_embeddings.weight");
        });
        if (emb != merged.end()) {
            uint64_t size = 0;
            for (const RecordPiece& p : emb->second.first) size += p.length;
            uint64_t copy = 0;
            for (const RecordPiece& p : tied_copy) copy += p.length;
            if (size == copy) {
                DistInfo::Replica rep;
                rep.name = tied_name + " (the tied copy of the word embeddings)";
                rep.size = size;
                rep.dtype = tied_dtype;
                rep.where = {"the first stage's word embeddings", tied_where};
                rep.copies = {emb->second.first, joined(tied_copy)};
                info.replicas.push_back(std::move(rep));
            }
        }
        info.notes.push_back("the output layer of the last pipeline stage is the tied copy of the word embeddings (" + tied_where +
                             "): left out, as a TP=1/PP=1 save has none; verify compares it");
    }
    if (auto padded = args.i("padded_vocab_size"))
        for (const auto& [name, joined_tensor] : merged)
            if (const auto& shape = joined_tensor.second; !shape.empty() && shape[0] != *padded)
                throw Error(ErrorKind::corrupt, dir,
                            "the tensor-parallel pieces of " + name + " make " + std::to_string(shape[0]) + " rows, args says padded_vocab_size " +
                                std::to_string(*padded));

}

void open_torch_format(DistView& view, const std::string& dir, Value* root, std::optional<int64_t>& vocab) {
    DistInfo& info = *view.c.dist;
    info.layout = "megatron-torch";
    // The rank folders, then what their names mean (args of the first says which suffix is which).
    std::vector<std::pair<std::string, std::vector<int>>> names;
    for (const std::string& n : dist::list_dir(dir)) {
        std::smatch m;
        if (!std::regex_match(n, m, rank_dir_pattern()) || !dist::is_dir(dir + "/" + n)) continue;
        std::vector<int> nums;
        for (size_t g = 1; g <= 3; ++g)
            if (m[g].matched) nums.push_back(std::stoi(m[g]));
        names.emplace_back(n, nums);
    }
    std::sort(names.begin(), names.end());
    if (names.empty()) throw Error(ErrorKind::format, dir, "holds no mp_rank_* folder");
    std::unique_ptr<Checkpoint> first = view.open_part(names.front().first + "/" + k_rank_file);
    const std::string first_path = first->path();
    Args args{field(first->root(), "args")};
    if (!args.v) throw Error(ErrorKind::format, first->path(), "holds no `args`: not a Megatron checkpoint (its model-parallel degrees are unknown)");
    DistInfo::Degrees d = degrees_of(args);
    if (d.tensor < 1 || d.pipeline < 1 || d.expert < 1 || d.virtual_pipeline < 1 || d.tensor > 4096 || d.pipeline > 4096 || d.expert > 4096 ||
        d.virtual_pipeline > 4096)
        throw Error(ErrorKind::corrupt, first->path(), "args holds model-parallel degrees out of range");
    info.parallel = d;
    describe_model(args, info);
    vocab = args.i("vocab_size");
    if (auto cv = field(first->root(), "checkpoint_version"); cv && cv->kind == ValueKind::floating && cv->f() < 2.0 && d.tensor > 1)
        throw Error(ErrorKind::unsupported, first->path(),
                    "checkpoint_version " + repr(cv, 20) + " orders the fused QKV rows per rank another way (Megatron's fix_query_key_value_ordering): not merged");
    std::map<std::tuple<int, int, int>, std::string> by_rank;
    for (const auto& [n, nums] : names) {
        size_t want = 1 + (d.pipeline > 1) + (d.expert > 1);
        if (nums.size() != want)
            throw Error(ErrorKind::corrupt, dir + "/" + n,
                        "is not a rank folder of this run: args says TP " + std::to_string(d.tensor) + " × PP " + std::to_string(d.pipeline) + " × EP " +
                            std::to_string(d.expert) + ", whose folders are named like " + rank_name(0, 0, 0, d));
        int tp = nums[0], pp = d.pipeline > 1 ? nums[1] : 0, ep = d.expert > 1 ? nums.back() : 0;
        if (tp >= d.tensor || pp >= d.pipeline || ep >= d.expert)
            throw Error(ErrorKind::corrupt, dir + "/" + n,
                        "is past the run's degrees: args says TP " + std::to_string(d.tensor) + " × PP " + std::to_string(d.pipeline) + " × EP " + std::to_string(d.expert));
        by_rank[{pp, ep, tp}] = n;
    }
    size_t want = static_cast<size_t>(d.tensor) * d.pipeline * d.expert;
    std::vector<RankFile> files;
    for (int pp = 0; pp < d.pipeline; ++pp)
        for (int ep = 0; ep < d.expert; ++ep)
            for (int tp = 0; tp < d.tensor; ++tp) {
                auto it = by_rank.find({pp, ep, tp});
                std::string rel = (it == by_rank.end() ? rank_name(tp, pp, ep, d) : it->second) + "/" + k_rank_file;
                if (it == by_rank.end() || !dist::is_file(dir + "/" + rel))
                    throw Error(ErrorKind::corrupt, dir + "/" + rel,
                                "is missing: args says TP " + std::to_string(d.tensor) + " × PP " + std::to_string(d.pipeline) + " × EP " +
                                    std::to_string(d.expert) + " (" + std::to_string(want) + " files), " + std::to_string(by_rank.size()) + " rank folders found");
                RankFile f;
                f.tp = tp, f.pp = pp, f.ep = ep, f.rel = rel;
                files.push_back(std::move(f));
            }
    info.world_size = static_cast<int>(want);
    // Open them all; each must agree with the first on the iteration and the model's shape.
    auto iteration = int_of(field(first->root(), "iteration"));
    info.iteration = iteration;
    static const char* const k_agree[] = {"num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups",
                                          "padded_vocab_size", "tensor_model_parallel_size", "pipeline_model_parallel_size",
                                          "expert_model_parallel_size", "num_experts", "swiglu", "untie_embeddings_and_output_weights"};
    const Value* version = field(first->root(), "checkpoint_version");
    for (RankFile& f : files) {
        f.part = f.rel == names.front().first + "/" + k_rank_file ? std::move(first) : view.open_part(f.rel);
        info.files.push_back(f.rel);
        info.bytes += f.part->file_size();
        const Value* r = f.part->root();
        auto it = int_of(field(r, "iteration"));
        if (it != iteration)
            throw Error(ErrorKind::corrupt, f.part->path(),
                        "is of iteration " + (it ? std::to_string(*it) : std::string("none")) + ", " + files.front().rel + " of " +
                            (iteration ? std::to_string(*iteration) : std::string("none")) + ": files of two saves are mixed");
        Args a{field(r, "args")};
        for (const char* k : k_agree)
            if (repr(field(a.v, k), 80) != repr(field(args.v, k), 80))
                throw Error(ErrorKind::corrupt, f.part->path(),
                            std::string("args.") + k + " is " + repr(field(a.v, k), 40) + ", " + files.front().rel + " says " + repr(field(args.v, k), 40) +
                                ": files of two runs are mixed");
        std::vector<const Value*> models;
        if (const Value* m = field(r, "model")) models.push_back(m);
        for (int v = 0;; ++v) {
            const Value* m = field(r, "model" + std::to_string(v));
            if (!m) break;
            models.push_back(m);
        }
        if (models.empty()) throw Error(ErrorKind::format, f.part->path(), "holds no `model` (nor model0 …): no weights");
        if (d.virtual_pipeline > 1 && static_cast<int>(models.size()) != d.virtual_pipeline)
            throw Error(ErrorKind::corrupt, f.part->path(),
                        "holds " + std::to_string(models.size()) + " model chunks, args says " + std::to_string(d.virtual_pipeline) + " virtual pipeline stages");
        if (models.size() > 1 && d.virtual_pipeline == 1) d.virtual_pipeline = static_cast<int>(models.size()), info.parallel = d;
        for (const Value* m : models) add_chunk(f, m);
    }
    for (const RankFile& f : files)
        if (static_cast<int>(f.chunks.size()) != d.virtual_pipeline)
            throw Error(ErrorKind::corrupt, f.part->path(),
                        "holds " + std::to_string(f.chunks.size()) + " model chunks, another rank file " + std::to_string(d.virtual_pipeline) +
                            ": the virtual pipeline stages disagree");
    info.writer = std::string("Megatron-LM, --ckpt-format torch") + (version ? " (checkpoint_version " + repr(version, 20) + ")" : "");
    Value* model = view.dict(true);
    RankFiles set{args, d, std::move(files), first_path};
    join_rank_files(view, dir, model, set);
    files = std::move(set.files);

    // The rest of the first rank's file (args, iteration, scheduler …); per-rank state is left out.
    const Value* r0 = files.front().part->root();
    for (size_t i = 0; i < r0->dict_size(); ++i) {
        auto k = str_of(r0->dict_key(i));
        if (!k || *k == "optimizer" || *k == "rng_state" || text::starts_with(*k, "model")) continue;
        view.set(root, *k, view.copy(*files.front().part, r0->dict_value(i)));
    }
    view.set(root, "model", model);
    bool optimizer = false;
    for (const RankFile& f : files) optimizer = optimizer || field(f.part->root(), "optimizer");
    if (optimizer)
        info.notes.push_back("optimizer state: in every rank file, keyed by position within its parameter groups (not by name): not merged");
    if (args.b("sequence_parallel")) info.notes.push_back("sequence parallelism: the replicated norms and biases can drift apart across tensor-parallel ranks; verify compares them");
}


}  // namespace ckpt::megatron
