// Megatron-LM (Megatron-Core and the models built on it) checkpoints opened as the one state dict a
// TP=1 / PP=1 run would save: Megatron's own names, global layer and expert numbers.
//
//   SAVE/latest_checkpointed_iteration.txt     "1000" (→ iter_0001000/) or "release" (→ release/)
//   SAVE/iter_N/mp_rank_TT[_PPP][_EEE]/model_optim_rng.pt     --ckpt-format torch: one torch.save per
//       model-parallel rank (TT tensor, PPP pipeline when PP > 1, EEE expert when EP > 1): args (an
//       argparse.Namespace), iteration, checkpoint_version, model (model0, model1 … per virtual
//       stage), optimizer (keyed by position), rng_state …; layer numbers local to the chunk
//   SAVE/iter_N/{.metadata, __R_S.distcp, metadata.json, common.pt}   --ckpt-format torch_dist: a
//       torch.distributed.checkpoint whose tensors are global, per-layer ones stacked [L, …] under a
//       key without the layer number; common.pt holds what is not a tensor (args, iteration …)
//
// Tensor-parallel pieces are joined by Megatron's rules (tensor_parallel/layers.py): dim 0 for the
// vocabulary-parallel embedding and output layer and the column-parallel linears (fused QKV grouped
// by query group, so the pieces are already in order; SwiGLU's fc1 holds [W_r; V_r] on each rank, so
// the W halves come first, then the V halves), dim 1 for the row-parallel linears; norms, the
// row-parallel biases, position embeddings and the router are replicated (rank 0's is taken, and
// verify compares every copy). A tensor no rule covers is refused when it is split: the files do not
// say along which dimension.
#include <algorithm>
#include <functional>
#include <map>
#include <regex>
#include <set>

#include "base/text_util.hpp"
#include "ckpt/error.hpp"
#include "formats/dist.hpp"
#include "formats/format.hpp"
#include "io/json.hpp"
#include "io/mapped_file.hpp"

namespace ckpt {

namespace {

using dist::field;
using dist::int_of;
using dist::str_of;

const char* const k_tracker = "latest_checkpointed_iteration.txt";
const char* const k_rank_file = "model_optim_rng.pt";

// mp_rank_TT, mp_rank_TT_PPP, mp_rank_TT_PPP_EEE (what each suffix is depends on args).
const std::regex& rank_dir_pattern() {
    static const std::regex r(R"(mp_rank_(\d{2,6})(?:_(\d{3,6}))?(?:_(\d{3,6}))?)");
    return r;
}

bool legacy_iteration_dir(const std::string& dir) {
    for (const std::string& n : dist::list_dir(dir))
        if (std::regex_match(n, rank_dir_pattern()) && dist::is_file(dir + "/" + n + "/" + k_rank_file)) return true;
    return false;
}

// Megatron's metadata.json names its backend ({"sharded_backend": "torch_dist", …}); another tool's
// metadata.json beside a Hugging Face index is no Megatron folder.
bool dist_metadata_json(const std::string& dir) {
    if (!dist::is_file(dir + "/metadata.json")) return false;
    try {
        auto j = read_json_file(dir + "/metadata.json");
        return j && j->is_object() && j->contains("sharded_backend");
    } catch (const Error&) {
        return dist::is_file(dir + "/.metadata");  // damaged beside a DCP index: said so when it is read
    }
}

bool iteration_dir(const std::string& dir) { return legacy_iteration_dir(dir) || dist_metadata_json(dir); }

std::string trimmed(std::string s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
    size_t a = 0;
    while (a < s.size() && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
    return s.substr(a);
}

bool all_digits(std::string_view s) { return !s.empty() && std::all_of(s.begin(), s.end(), [](char ch) { return ch >= '0' && ch <= '9'; }); }

// "1000" → iter_0001000, "release" → release (checkpointing.py get_checkpoint_name).
std::string iteration_folder(const std::string& it) {
    if (it == "release" || text::starts_with(it, "iter_")) return it;
    std::string n = it;
    while (n.size() < 7) n = "0" + n;
    return "iter_" + n;
}

// The iteration folder `given` means: itself, or under a save folder the one --tag names or the
// tracker file does. Fills info.tag, info.tags, info.latest.
std::string pick_iteration(const std::string& given, const OpenOptions& options, DistInfo& info) {
    if (iteration_dir(given)) {
        info.tag = text::base_name(given);
        if (options.tag && iteration_folder(*options.tag) != info.tag)
            throw Error(ErrorKind::usage, given, "is the folder of " + info.tag + ", not of --tag " + *options.tag);
        std::string top = text::parent_dir(given);
        if (dist::is_file(top + "/" + k_tracker)) info.latest = iteration_folder(trimmed(read_text_file(top + "/" + k_tracker, 4096, k_tracker)));
        return given;
    }
    for (const std::string& n : dist::list_dir(given))
        if ((text::starts_with(n, "iter_") || n == "release") && dist::is_dir(given + "/" + n)) info.tags.push_back(n);
    std::string tracker = given + "/" + k_tracker;
    if (dist::is_file(tracker)) {
        std::string t = trimmed(read_text_file(tracker, 4096, k_tracker));
        if (t != "release" && !all_digits(t))
            throw Error(ErrorKind::corrupt, tracker, "holds \"" + t.substr(0, 40) + "\", not an iteration number or `release`");
        info.latest = iteration_folder(t);
    }
    std::string list;
    for (const std::string& t : info.tags) list += (list.empty() ? "" : ", ") + t;
    if (options.tag) info.tag = iteration_folder(*options.tag);
    else if (!info.latest.empty()) info.tag = info.latest;
    else if (info.tags.size() == 1) info.tag = info.tags.front();
    else throw Error(ErrorKind::usage, given, "holds " + std::to_string(info.tags.size()) + " iterations (" + list + ") and no " + k_tracker + ": name one with --tag");
    std::string dir = given + "/" + info.tag;
    if (!dist::is_dir(dir))
        throw Error(ErrorKind::corrupt, given,
                    "has no folder " + info.tag + (options.tag ? " (--tag)" : std::string(" (named by ") + k_tracker + ")") +
                        (list.empty() ? std::string("; it holds no iteration folder") : "; its iterations: " + list));
    if (!iteration_dir(dir))
        throw Error(ErrorKind::corrupt, dir, "holds neither mp_rank_* folders of model_optim_rng.pt (--ckpt-format torch) nor metadata.json (torch_dist): an unfinished save?");
    return dir;
}

// Megatron's `args`: an argparse.Namespace whose attributes pickle restores as its BUILD state.
struct Args {
    const Value* v = nullptr;
    std::optional<int64_t> i(std::string_view name) const { return int_of(field(v, name)); }
    int64_t i(std::string_view name, int64_t fallback) const { return i(name).value_or(fallback); }
    bool b(std::string_view name, bool fallback = false) const { return i(name).value_or(fallback) != 0; }
    std::string s(std::string_view name) const { return std::string(str_of(field(v, name)).value_or("")); }
};

DistInfo::Degrees degrees_of(const Args& a) {
    DistInfo::Degrees d;
    d.tensor = static_cast<int>(a.i("tensor_model_parallel_size", 1));
    d.pipeline = static_cast<int>(a.i("pipeline_model_parallel_size", 1));
    d.expert = static_cast<int>(a.i("expert_model_parallel_size", 1));
    d.virtual_pipeline = static_cast<int>(a.i("virtual_pipeline_model_parallel_size").value_or(a.i("num_virtual_stages_per_pipeline_rank", 1)));
    return d;
}

void describe_model(const Args& a, DistInfo& info) {
    auto put = [&](const char* what, const std::string& value) {
        if (!value.empty()) info.model_shape.emplace_back(what, value);
    };
    auto num = [&](const char* name) { auto v = a.i(name); return v ? std::to_string(*v) : std::string(); };
    put("layers", num("num_layers"));
    put("hidden", num("hidden_size"));
    put("ffn_hidden", num("ffn_hidden_size"));
    put("heads", num("num_attention_heads"));
    if (a.b("group_query_attention")) put("query_groups", num("num_query_groups"));
    else put("query_groups", num("num_attention_heads"));
    if (auto v = a.i("vocab_size"); v && a.i("padded_vocab_size")) put("vocabulary", std::to_string(*v) + " padded to " + num("padded_vocab_size"));
    else put("vocabulary", num("padded_vocab_size"));
    put("experts", num("num_experts"));
    if (field(a.v, "swiglu")) put("activation", a.b("swiglu") ? "swiglu" : "gelu");
    put("normalization", a.s("normalization"));
    put("position_embedding", a.s("position_embedding_type"));
    if (field(a.v, "untie_embeddings_and_output_weights")) put("embeddings", a.b("untie_embeddings_and_output_weights") ? "untied" : "tied");
    put("transformer_impl", a.s("transformer_impl"));
}

// The "layers.N." of a name (decoder.layers.3.mlp…, language_model.encoder.layers.3.…): where N starts
// and its length; npos when there is none.
std::pair<size_t, size_t> layer_number(const std::string& name) {
    for (size_t at = name.find("layers."); at != std::string::npos; at = name.find("layers.", at + 1)) {
        if (at && name[at - 1] != '.') continue;
        size_t d = at + 7, e = d;
        while (e < name.size() && name[e] >= '0' && name[e] <= '9') ++e;
        if (e > d && e - d <= 9 && e < name.size() && name[e] == '.') return {d, e - d};  // ≤ 9 digits: an int64 however renumbered
    }
    return {std::string::npos, 0};
}

// A local expert's number: mlp.experts.local_experts.J. (SequentialMLP) or …linear_fcK.weightJ (TEGroupedMLP).
std::pair<size_t, size_t> expert_number(const std::string& name) {
    size_t at = name.find(".experts.local_experts.");
    if (at != std::string::npos) {
        size_t d = at + 23, e = d;
        while (e < name.size() && name[e] >= '0' && name[e] <= '9') ++e;
        if (e > d && e - d <= 9) return {d, e - d};
    }
    at = name.find(".experts.linear_fc");
    if (at != std::string::npos) {
        size_t e = name.size(), d = e;
        while (d > 0 && name[d - 1] >= '0' && name[d - 1] <= '9') --d;
        if (d < e && e - d <= 9 && (text::ends_with(name.substr(0, d), ".weight") || text::ends_with(name.substr(0, d), ".bias"))) return {d, e - d};
    }
    return {std::string::npos, 0};
}

std::string renumbered(const std::string& name, std::pair<size_t, size_t> at, int64_t n) {
    return name.substr(0, at.first) + std::to_string(n) + name.substr(at.first + at.second);
}

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

std::vector<RecordPiece> joined(std::vector<RecordPiece> pieces) {
    std::vector<RecordPiece> out;
    for (RecordPiece& p : pieces) {
        if (!out.empty() && out.back().file == p.file && out.back().offset + out.back().length == p.offset) out.back().length += p.length;
        else out.push_back(p);
    }
    return out;
}

// Bytes [start, start + n) of what `pieces` hold one after the other (untyped pieces).
std::vector<RecordPiece> bytes_of(const std::vector<RecordPiece>& pieces, uint64_t start, uint64_t n) {
    std::vector<RecordPiece> out;
    uint64_t at = 0;
    for (const RecordPiece& p : pieces) {
        if (n == 0) break;
        if (start >= at + p.length) {
            at += p.length;
            continue;
        }
        uint64_t from = start - at, take = std::min(n, p.length - from);
        out.push_back({p.file, p.offset + from, take, p.from, p.to});
        start += take;
        n -= take;
        at += p.length;
    }
    return out;
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

// ---------------------------------------------------------------------------------------------
// --ckpt-format torch

struct RankFile {
    int tp = 0, pp = 0, ep = 0;
    std::string rel;
    std::unique_ptr<Checkpoint> part;
    std::vector<std::vector<std::pair<std::string, const Value*>>> chunks;  // per virtual stage: its model's entries
};

void open_legacy(DistView& view, const std::string& dir, Value* root, std::optional<int64_t>& vocab) {
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
        for (const Value* m : models) {
            if (m->kind != ValueKind::dict) throw Error(ErrorKind::format, f.part->path(), "its model is " + repr(m, 40) + ", not a state dict");
            f.chunks.emplace_back();
            naming_file(f.part->path(), [&] { flatten(m, "", f.chunks.back(), 0); });
        }
    }
    for (const RankFile& f : files)
        if (static_cast<int>(f.chunks.size()) != d.virtual_pipeline)
            throw Error(ErrorKind::corrupt, f.part->path(),
                        "holds " + std::to_string(f.chunks.size()) + " model chunks, another rank file " + std::to_string(d.virtual_pipeline) +
                            ": the virtual pipeline stages disagree");
    info.writer = std::string("Megatron-LM, --ckpt-format torch") + (version ? " (checkpoint_version " + repr(version, 20) + ")" : "");
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

    Value* model = view.dict(true);
    std::map<std::string, std::vector<RecordPiece>> merged;  // name → its pieces (for the tied copy)
    std::map<std::string, std::vector<int64_t>> merged_shape;
    std::set<std::string> seen;
    auto emit_value = [&](const std::string& name, Value* v) {
        if (!seen.insert(name).second) throw Error(ErrorKind::corrupt, dir, "two rank files give " + name + " (after renumbering layers and experts)");
        view.set(model, name, v);
    };
    std::vector<RecordPiece> tied_copy;
    std::string tied_where;
    DType tied_dtype = DType::untyped;
    for (int vp = 0; vp < d.virtual_pipeline; ++vp)
        for (int pp = 0; pp < d.pipeline; ++pp)
            for (int ep = 0; ep < d.expert; ++ep) {
                RankFile& f0 = at(0, pp, ep);
                // Each TP rank's entries by name, checked to be the same names.
                std::vector<std::map<std::string, const Value*>> names_of(static_cast<size_t>(d.tensor));
                for (int tp = 0; tp < d.tensor; ++tp) {
                    for (const auto& [n, v] : at(tp, pp, ep).chunks[vp]) names_of[tp][n] = v;
                    if (names_of[tp].size() != f0.chunks[vp].size() || (tp && names_of[tp].size() != names_of[0].size()))
                        throw Error(ErrorKind::corrupt, at(tp, pp, ep).part->path(),
                                    "holds " + std::to_string(names_of[tp].size()) + " model entries, " + f0.rel + " " +
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
                        auto it = names_of[tp].find(name);
                        if (it == names_of[tp].end())
                            throw Error(ErrorKind::corrupt, at(tp, pp, ep).part->path(), "has no " + name + ", which " + f0.rel + " holds");
                        vals.push_back(it->second);
                    }
                    // Values, and TransformerEngine's _extra_state (its pickled FP8 scaling state, a uint8
                    // tensor each rank keeps for itself): rank 0's, as Megatron's own TP=1 re-save keeps one.
                    if (!v0 || v0->kind != ValueKind::tensor || text::ends_with(name, "._extra_state")) {
                        emit_value(global, view.copy(*f0.part, v0));
                        continue;
                    }
                    if (tied && d.pipeline > 1 && pp == d.pipeline - 1 && global == "output_layer.weight") {
                        // The last stage's copy of the tied embedding: a TP=1/PP=1 save has none.
                        tied_where = f0.rel;
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
                    merged[global] = pieces;
                    merged_shape[global] = shape;
                    emit_value(global, view.tensor(view.add_tensor(global, t0.dtype, shape, std::move(pieces))));
                }
                // The non-expert tensors of the other expert-parallel ranks: copies of ep 0's.
                if (ep == 0) continue;
                for (const auto& [name, v] : f0.chunks[vp]) {
                    if (!v || v->kind != ValueKind::tensor || expert_number(name).first != std::string::npos) continue;
                    for (int tp = 0; tp < d.tensor; ++tp) {
                        const Checkpoint& p0 = *at(tp, pp, 0).part;
                        const Checkpoint& p = *at(tp, pp, ep).part;
                        const Value* w = nullptr;
                        for (const auto& [n0, v0] : at(tp, pp, 0).chunks[vp])
                            if (n0 == name) w = v0;
                        const Value* x = nullptr;
                        for (const auto& [n1, v1] : at(tp, pp, ep).chunks[vp])
                            if (n1 == name) x = v1;
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
        auto emb = merged.find("embedding.word_embeddings.weight");
        if (emb == merged.end()) emb = merged.find("language_model.embedding.word_embeddings.weight");
        if (emb != merged.end()) {
            uint64_t size = 0;
            for (const RecordPiece& p : emb->second) size += p.length;
            uint64_t copy = 0;
            for (const RecordPiece& p : tied_copy) copy += p.length;
            if (size == copy) {
                DistInfo::Replica rep;
                rep.name = "output_layer.weight (the tied copy of the word embeddings)";
                rep.size = size;
                rep.dtype = tied_dtype;
                rep.where = {"the first stage's word embeddings", tied_where};
                rep.copies = {emb->second, joined(tied_copy)};
                info.replicas.push_back(std::move(rep));
            }
        }
        info.notes.push_back("output_layer.weight of the last pipeline stage is the tied copy of the word embeddings (" + tied_where +
                             "): left out, as a TP=1/PP=1 save has none; verify compares it");
    }
    if (auto padded = args.i("padded_vocab_size"))
        for (const auto& [name, shape] : merged_shape)
            if ((text::ends_with(name, "word_embeddings.weight") || name == "output_layer.weight") && !shape.empty() && shape[0] != *padded)
                throw Error(ErrorKind::corrupt, dir,
                            "the tensor-parallel pieces of " + name + " make " + std::to_string(shape[0]) + " rows, args says padded_vocab_size " +
                                std::to_string(*padded));

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

// ---------------------------------------------------------------------------------------------
// --ckpt-format torch_dist

void open_torch_dist(DistView& view, const std::string& dir, Value* root, std::optional<int64_t>& vocab) {
    DistInfo& info = *view.c.dist;
    info.layout = "megatron-torch_dist";
    auto meta_json = read_json_file(dir + "/metadata.json");
    if (!meta_json || !meta_json->is_object())
        throw Error(ErrorKind::format, dir + "/metadata.json", "is not Megatron's metadata.json (a JSON object)");
    std::string backend = json_string_or(*meta_json, "sharded_backend");
    if (backend == "zarr") throw Error(ErrorKind::unsupported, dir + "/metadata.json", "names the zarr backend (Megatron ≤ 2025, NeMo 1 .nemo files): not read yet");
    if (backend != "torch_dist")
        throw Error(ErrorKind::format, dir + "/metadata.json", "names sharded_backend \"" + backend + "\", not torch_dist");
    if (!dist::is_file(dir + "/.metadata"))
        throw Error(ErrorKind::corrupt, dir + "/.metadata", "is missing: metadata.json says torch_dist, whose index it is");
    DcpFolder folder = read_dcp(view, dir);
    info.files.insert(info.files.begin(), "metadata.json");
    if (dist::is_file(dir + "/integrity.json"))
        info.notes.push_back("integrity.json: the SHA-256 of every file, which verify checks");
    // What is not a tensor: common.pt, or (newer saves) the common_state item.
    const Value* common = nullptr;
    std::unique_ptr<Checkpoint> common_part;
    if (dist::is_file(dir + "/common.pt")) {
        common_part = view.open_part("common.pt");
        info.files.push_back("common.pt");
        common = common_part->root();
    }
    for (const DcpItem& item : folder.items)
        if (!common && item.value && (item.fqn == "common_state" || text::starts_with(item.fqn, "common_state/"))) {
            common = item.value;
            if (common->kind == ValueKind::list && common->items().size() == 1) common = common->items()[0];
        }
    if (!common || common->kind != ValueKind::dict)
        throw Error(ErrorKind::corrupt, dir, "holds no common.pt and no common_state item: the args and iteration of this save are missing");
    Args args{field(common, "args")};
    if (!args.v) throw Error(ErrorKind::corrupt, dir + "/common.pt", "holds no `args`: the model's shape is unknown");
    info.parallel = degrees_of(args);
    vocab = args.i("vocab_size");
    info.iteration = int_of(field(common, "iteration"));
    describe_model(args, info);
    std::string era = field(folder.meta, "mcore_data") ? " ≤ 0.14" : dist::class_of(folder.meta).find("MCoreMetadata") != std::string::npos ? " 0.15" : "";
    info.writer = "Megatron-Core" + era + ", --ckpt-format torch_dist";
    auto num_layers = args.i("num_layers");
    bool local_spec = args.s("transformer_impl") == "local";

    struct Entry {
        int64_t order;  // 0 embedding, 1 + layer, past the layers the rest
        std::string name;
        Value* value = nullptr;  // a non-tensor
        DType dtype = DType::untyped;
        std::vector<int64_t> shape;
        std::vector<RecordPiece> pieces;
    };
    std::vector<Entry> model, moments_list;
    std::vector<std::string> moment_of;
    std::vector<std::pair<std::string, Value*>> objects;
    size_t stacked_kept = 0;
    std::string stacked_example;
    const int64_t tail = num_layers.value_or(0) + 2;
    // The model's own names for the layer norms of the local spec, which torch_dist stores under
    // TransformerEngine's (the local spec maps them back when it loads).
    auto model_name = [&](std::string n) {
        if (!local_spec) return n;
        for (auto [from, to] : {std::pair<std::string_view, std::string_view>{".self_attention.linear_qkv.layer_norm_", ".input_layernorm."},
                                {".mlp.linear_fc1.layer_norm_", ".pre_mlp_layernorm."}}) {
            size_t at = n.find(from);
            if (at != std::string::npos) return n.substr(0, at) + std::string(to) + n.substr(at + from.size());
        }
        return n;
    };
    auto order_of = [&](const std::string& n, int64_t layer) -> int64_t {
        if (layer >= 0) return 1 + layer;
        return text::starts_with(n, "embedding.") ? 0 : tail;
    };
    // A tensor as the model names it: an expert tensor with its expert axis [E, …] first (SequentialMLP's
    // mlp.experts.experts.X, TEGroupedMLP's mlp.experts.linear_fcN.weight) cut per expert.
    auto num_experts = args.i("num_experts");
    auto emit = [&](std::vector<Entry>& to, int64_t order, const std::string& name, DType dtype, std::vector<int64_t> shape,
                    std::vector<RecordPiece> pieces) {
        size_t seq = name.find(".mlp.experts.experts.");
        bool grouped = seq == std::string::npos && name.find(".mlp.experts.linear_fc") != std::string::npos &&
                       (text::ends_with(name, ".weight") || text::ends_with(name, ".bias"));
        if (seq != std::string::npos || grouped) {
            if (num_experts && *num_experts > 0 && !shape.empty() && shape[0] == *num_experts) {
                std::vector<int64_t> sub(shape.begin() + 1, shape.end());
                uint64_t per = dist::numel(sub) * dtype_size(dtype);
                for (int64_t e = 0; e < *num_experts; ++e) {
                    std::string n = seq != std::string::npos
                                        ? name.substr(0, seq) + ".mlp.experts.local_experts." + std::to_string(e) + "." + name.substr(seq + 21)
                                        : name + std::to_string(e);
                    to.push_back({order, n, nullptr, dtype, sub, bytes_of(pieces, static_cast<uint64_t>(e) * per, per)});
                }
                return;
            }
            ++stacked_kept;
            if (stacked_example.empty()) stacked_example = name + " " + dist::shape_text(shape);
        }
        to.push_back({order, name, nullptr, dtype, std::move(shape), std::move(pieces)});
    };
    // A tensor under its key: per layer when stacked [L, …] under decoder.layers.<no number>.
    auto add = [&](std::vector<Entry>& to, const std::string& key, DcpItem& item) {
        const std::string stack = "decoder.layers.";
        if (text::starts_with(key, stack) && !(key.size() > stack.size() && std::isdigit(static_cast<unsigned char>(key[stack.size()])))) {
            if (!num_layers || item.shape.empty() || item.shape[0] != *num_layers)
                throw Error(ErrorKind::corrupt, dir + "/.metadata",
                            key + " is " + dist::shape_text(item.shape) + ", not stacked over the " + (num_layers ? std::to_string(*num_layers) : std::string("(unknown)")) +
                                " layers args names: its layers cannot be told apart");
            std::vector<int64_t> shape(item.shape.begin() + 1, item.shape.end());
            uint64_t per = dist::numel(shape) * dtype_size(item.dtype);
            for (int64_t l = 0; l < *num_layers; ++l) {
                std::string name = model_name(stack + std::to_string(l) + "." + key.substr(stack.size()));
                emit(to, order_of(name, l), name, item.dtype, shape, bytes_of(item.pieces, static_cast<uint64_t>(l) * per, per));
            }
            return;
        }
        auto ln = layer_number(key);
        int64_t layer = ln.first != std::string::npos && text::starts_with(key, stack) ? std::stoll(key.substr(ln.first, ln.second)) : -1;
        std::string name = model_name(key);
        emit(to, order_of(name, layer), name, item.dtype, item.shape, std::move(item.pieces));
    };
    static const std::regex layer_shard(R"(shard_(\d{1,9})_(\d{1,9}))");
    for (DcpItem& item : folder.items) {
        if (item.value) {
            size_t slash = item.fqn.find("/shard_");
            std::string base = item.fqn.substr(0, slash);
            std::smatch m;
            std::string shard = slash == std::string::npos ? "" : item.fqn.substr(slash + 1);
            if (text::ends_with(base, "._extra_state") && text::starts_with(base, "decoder.layers.") && std::regex_match(shard, m, layer_shard) &&
                num_layers && std::stoll(m[2]) == *num_layers) {
                int64_t l = std::stoll(m[1]);
                std::string name = "decoder.layers." + std::to_string(l) + "." + base.substr(15);
                Value* v = item.value;
                if (v->kind == ValueKind::list && v->items().size() == 1) v = v->items()[0];  // saved as torch.save([obj])
                model.push_back({1 + l, name, v, DType::untyped, {}, {}});
            } else if (text::ends_with(base, "._extra_state") && shard.empty()) {
                Value* v = item.value;
                if (v->kind == ValueKind::list && v->items().size() == 1) v = v->items()[0];
                model.push_back({order_of(base, -1), base, v, DType::untyped, {}, {}});
            } else if (base != "common_state") {
                objects.emplace_back(item.fqn, item.value);
            }
            continue;
        }
        static const std::string opt = "optimizer.state.";
        if (text::starts_with(item.fqn, opt)) {
            size_t dot = item.fqn.find('.', opt.size());
            if (dot != std::string::npos) {
                std::string moment = item.fqn.substr(opt.size(), dot - opt.size());
                size_t before = moments_list.size();
                add(moments_list, item.fqn.substr(dot + 1), item);
                for (size_t k = before; k < moments_list.size(); ++k) moment_of.push_back(moment);
                continue;
            }
        }
        add(model, item.fqn, item);
    }
    auto by_order = [](const Entry& a, const Entry& b) { return a.order < b.order; };
    std::stable_sort(model.begin(), model.end(), by_order);
    // The root: common.pt's dict, "model" the merged state dict, "optimizer_moments" moment → name → tensor.
    for (size_t i = 0; i < common->dict_size(); ++i) {
        auto k = str_of(common->dict_key(i));
        if (!k || *k == "model") continue;
        view.set(root, *k, common_part ? view.copy(*common_part, common->dict_value(i)) : common->dict_value(i));
    }
    Value* sd = view.dict(true);
    std::set<std::string> seen;
    for (Entry& e : model) {
        if (!seen.insert(e.name).second) throw Error(ErrorKind::corrupt, dir + "/.metadata", "two items are " + e.name + " once unstacked");
        view.set(sd, e.name, e.value ? e.value : view.tensor(view.add_tensor(e.name, e.dtype, e.shape, std::move(e.pieces))));
    }
    view.set(root, "model", sd);
    if (!moments_list.empty()) {
        Value* moments = view.dict(true);
        std::map<std::string, Value*> per;
        for (size_t k = 0; k < moments_list.size(); ++k) {
            Entry& e = moments_list[k];
            Value*& d = per[moment_of[k]];
            if (!d) {
                d = view.dict(true);
                view.set(moments, moment_of[k], d);
            }
            view.set(d, e.name, view.tensor(view.add_tensor("optimizer.state." + moment_of[k] + "." + e.name, e.dtype, e.shape, std::move(e.pieces))));
        }
        view.set(root, "optimizer_moments", moments);
        info.notes.push_back("optimizer moments (" + std::to_string(per.size()) + ": " + [&] {
            std::string s;
            for (const auto& [m, d] : per) s += (s.empty() ? "" : ", ") + m;
            return s;
        }() + ") merged by name under optimizer_moments");
    } else {
        bool dp = false;
        for (const auto& [k, v] : objects) dp = dp || text::starts_with(k, "optimizer.distributed.");
        if (dp) info.notes.push_back("optimizer state: distributed optimizer buffers per data-parallel rank (dp_reshardable): not merged");
    }
    if (!objects.empty()) {
        Value* o = view.dict(true);
        for (const auto& [k, v] : objects) view.set(o, k, v);
        view.set(root, "sharded_objects", o);
    }
    if (stacked_kept)
        info.notes.push_back(std::to_string(stacked_kept) + " expert tensors kept as stored (" + stacked_example +
                             "): their first axis is not args' num_experts, so it is not cut per expert");
}

// --unpad-vocab: the rows of the word embeddings and the output layer (and their moments) past the
// true vocabulary are padding (vocab_utils.py: padded to a multiple of make_vocab_size_divisible_by ×
// TP); each such tensor becomes a view of its first `rows` rows, which stays contiguous.
void unpad(Checkpoint::Contents& c, Value* root, int64_t rows, const std::string& dir) {
    if (rows <= 0) throw Error(ErrorKind::usage, dir, "--unpad-vocab: args records no vocab_size; give the true vocabulary size (--unpad-vocab N)");
    size_t cut = 0;
    std::function<void(Value*, const std::string&)> walk = [&](Value* d, const std::string& prefix) {
        for (size_t i = 0; i < d->dict_size(); ++i) {
            auto k = str_of(d->dict_key(i));
            Value* v = d->dict_value(i);
            if (!k || !v) continue;
            std::string name = prefix + std::string(*k);
            if (v->kind == ValueKind::dict) {
                walk(v, name + ".");
                continue;
            }
            if (v->kind != ValueKind::tensor || !(text::ends_with(name, "word_embeddings.weight") || text::ends_with(name, "output_layer.weight"))) continue;
            TensorInfo& t = c.tensors[static_cast<size_t>(v->i())];
            if (t.shape.empty() || t.shape[0] < rows)
                throw Error(ErrorKind::usage, dir, "--unpad-vocab " + std::to_string(rows) + ": " + name + " has only " +
                                                       (t.shape.empty() ? std::string("no") : std::to_string(t.shape[0])) + " rows");
            t.shape[0] = rows;
            if (const char* why = t.count_elements()) throw Error(ErrorKind::corrupt, dir, name + ": " + why);
            ++cut;
        }
    };
    if (Value* m = root->get("model")) walk(m, "");
    if (Value* m = root->get("optimizer_moments")) walk(m, "optimizer_moments.");
    if (!cut) throw Error(ErrorKind::usage, dir, "--unpad-vocab: no word embeddings or output layer to cut");
    c.dist->notes.push_back("--unpad-vocab: the word embeddings and output layer cut to their first " + std::to_string(rows) + " rows (the rest is padding)");
}

}  // namespace

std::string megatron_folder_of(const std::string& path) {
    if (text::base_name(path) != k_rank_file || !dist::is_file(path)) return "";
    std::string rank = text::parent_dir(path);
    if (!std::regex_match(text::base_name(rank), rank_dir_pattern())) return "";
    std::string it = text::parent_dir(rank);
    int ranks = 0;
    for (const std::string& n : dist::list_dir(it)) ranks += std::regex_match(n, rank_dir_pattern()) && dist::is_file(it + "/" + n + "/" + k_rank_file);
    return ranks > 1 ? it : "";  // mp_rank_00 alone is a whole (TP=1, PP=1) save
}

DistTarget megatron_target(const std::string& path) {
    if (!dist::is_dir(path)) return {};
    if (dist::is_file(path + "/" + k_tracker) || iteration_dir(path)) return {DistKind::megatron, path};
    return {};
}

std::unique_ptr<Checkpoint> open_megatron(const std::string& given, const OpenOptions& options) {
    auto contents = std::make_unique<Checkpoint::Contents>();
    Checkpoint::Contents* c = contents.get();
    c->path = given;
    c->dist = DistInfo{};
    std::string dir = pick_iteration(given, options, *c->dist);
    c->dist->dir = dir;
    DistView view(*c, options);
    Value* root = view.dict();
    std::optional<int64_t> vocab;
    if (legacy_iteration_dir(dir)) open_legacy(view, dir, root, vocab);
    else open_torch_dist(view, dir, root, vocab);
    if (options.unpad_vocab) unpad(*c, root, *options.unpad_vocab ? *options.unpad_vocab : vocab.value_or(0), dir);
    view.finish(root, "model");
    for (const TensorInfo& t : c->tensors) c->dist->elements += t.numel;
    return std::make_unique<Checkpoint>(std::move(contents));
}

}  // namespace ckpt
