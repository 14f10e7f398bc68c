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
// This file: which folder is a save and which iteration it means, what both formats share (args,
// numbers in names, byte ranges), --unpad-vocab, and opening. The formats: megatron_torch.cpp,
// megatron_dist.cpp.
#include <algorithm>
#include <functional>
#include <map>
#include <regex>
#include <set>

#include "base/text_util.hpp"
#include "ckpt/error.hpp"
#include "formats/dist.hpp"
#include "formats/megatron.hpp"
#include "formats/format.hpp"
#include "io/json.hpp"
#include "io/mapped_file.hpp"

namespace ckpt {

namespace {

using dist::field;
using dist::int_of;
using dist::str_of;
using namespace megatron;


const char* const k_tracker = "latest_checkpointed_iteration.txt";


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
}  // namespace

namespace megatron {

const char* const k_rank_file = "model_optim_rng.pt";

const std::regex& rank_dir_pattern() {
    static const std::regex r(R"(mp_rank_(\d{2,6})(?:_(\d{3,6}))?(?:_(\d{3,6}))?)");
    return r;
}
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

}  // namespace megatron

namespace {

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
    if (legacy_iteration_dir(dir)) open_torch_format(view, dir, root, vocab);
    else open_torch_dist(view, dir, root, vocab);
    if (options.unpad_vocab) unpad(*c, root, *options.unpad_vocab ? *options.unpad_vocab : vocab.value_or(0), dir);
    view.finish(root, "model");
    return std::make_unique<Checkpoint>(std::move(contents));
}

}  // namespace ckpt
