// NeMo 1's wrapper of Megatron checkpoints, opened as the state dict a TP=1 / PP=1 .nemo holds.
//
//   NAME.nemo  a tar, uncompressed since NeMo 1.7 (gzip before), written by NLPSaveRestoreConnector
//   (nemo/collections/nlp/parts/nlp_overrides.py), or the folder one was extracted to:
//     model_config.yaml                          the model's config (OmegaConf YAML)
//     model_weights.ckpt                         TP = PP = 1: torch.save(model.state_dict())
//     mp_rank_TT/model_weights.ckpt              TP > 1, PP = 1
//     tp_rank_TT_pp_rank_PPP/model_weights.ckpt  PP > 1
//     model_weights/                             distributed checkpointing (torch_dist or zarr)
//   Names in the tar start with "./" (tar.add(dir, arcname=".")). Each weights file is a plain state
//   dict whose keys carry the Lightning module's `model.` prefix (model.decoder.layers.0.…), layers
//   numbered from 0 on every pipeline stage, split over tensor parallelism as Megatron splits them.
//
// The degrees and the model's shape come from the config (no `args` is saved); the rank files are
// read in place (a tar member is a byte range of the .nemo) and joined by megatron_torch.cpp's rules.
//
// NeMo 2 (and Megatron-Bridge) checkpoints are a folder (nemo/lightning/ckpt_utils.py):
//     weights/    a torch_dist folder (metadata.json, .metadata, __R_S.distcp, common.pt) whose keys
//                 carry MegatronParallel's `module.` prefix; common.pt is Lightning's rest (global_step …)
//     context/    model.yaml (the model's config under `config:`), io.json, the tokenizer
// read by megatron_dist.cpp with the config standing in for `args`.
#include <algorithm>
#include <map>
#include <memory>
#include <regex>
#include <set>

#include "base/text_util.hpp"
#include "ckpt/error.hpp"
#include "formats/dist.hpp"
#include "formats/megatron.hpp"
#include "io/mapped_file.hpp"
#include "io/yaml_scalars.hpp"
#include "model/contents.hpp"
#include "scan/tar_reading.hpp"

namespace ckpt {

namespace {

using namespace megatron;

const char* const k_config = "model_config.yaml";
const char* const k_weights = "model_weights.ckpt";

// Where a member's bytes are: a byte range of the .nemo, or a file of the extracted folder.
struct Member {
    uint64_t offset = 0, size = 0;
};

struct Nemo {
    std::string path;
    std::shared_ptr<MappedFile> tar;          // null: an extracted folder
    std::map<std::string, Member> members;    // the tar's regular members, "./" dropped
    bool has(const std::string& rel) const { return tar ? members.count(rel) > 0 : dist::is_file(path + "/" + rel); }
    bool has_dir(const std::string& rel) const {
        if (!tar) return dist::is_dir(path + "/" + rel);
        auto it = members.lower_bound(rel + "/");
        return it != members.end() && text::starts_with(it->first, rel + "/");
    }
    std::string text(const std::string& rel) const {
        if (!tar) return read_text_file(path + "/" + rel, 16u << 20, rel);
        const Member& m = members.at(rel);
        if (m.size > (16u << 20)) throw Error(ErrorKind::limit, path + "/" + rel, "is larger than 16 MiB: not a model's config");
        return std::string(tar->view().sub(m.offset, m.size)->as_chars());
    }
    std::unique_ptr<Checkpoint> open(DistView& view, const std::string& rel) const {
        if (!tar) return view.open_part(rel);
        const Member& m = members.at(rel);
        return view.open_part(tar, rel, m.offset, m.size, true);
    }
};

std::string stripped(std::string name) {
    while (text::starts_with(name, "./")) name = name.substr(2);
    return name;
}

Nemo read_nemo(const std::string& path) {
    Nemo n;
    n.path = path;
    if (dist::is_dir(path)) return n;
    n.tar = std::make_shared<MappedFile>(path);
    ByteView bytes = n.tar->view();
    if (bytes.size >= 2 && bytes.data[0] == 0x1f && bytes.data[1] == 0x8b)
        throw Error(ErrorKind::unsupported, path,
                    "is a gzip-compressed .nemo (NeMo before 1.7): its members cannot be read in place; extract it (tar xzf) and give the folder");
    TarReading t = read_tar(bytes);
    if (!t.accepted) throw Error(ErrorKind::format, path, "is not a tar archive, as a .nemo file is");
    if (!t.problem.empty()) throw Error(ErrorKind::corrupt, path, "its tar cannot be read to the end: " + t.problem);
    for (const TarMember& m : t.members)
        if (m.regular()) n.members[stripped(m.name)] = {m.data, m.size};  // the last of a name, as tarfile takes it
    return n;
}

// The config's scalars as Megatron's `args` would name them, in a dict of the view.
Value* args_from_config(DistView& view, const std::map<std::string, std::string>& cfg, const std::string& where) {
    Value* args = view.dict();
    auto integer = [&](const std::string& key) -> std::optional<int64_t> {
        auto it = cfg.find(key);
        if (it == cfg.end()) return std::nullopt;
        const std::string& v = it->second;
        if (v.empty() || v.size() > 12 || !std::all_of(v.begin(), v.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
            throw Error(ErrorKind::corrupt, where, key + " is \"" + v.substr(0, 40) + "\", not a whole number");
        return std::stoll(v);
    };
    auto boolean = [&](const std::string& key) -> std::optional<bool> {
        auto it = cfg.find(key);
        if (it == cfg.end()) return std::nullopt;
        std::string v = it->second;
        if (v == "true" || v == "True" || v == "TRUE") return true;
        if (v == "false" || v == "False" || v == "FALSE") return false;
        throw Error(ErrorKind::corrupt, where, key + " is \"" + v.substr(0, 40) + "\", not true or false");
    };
    auto put = [&](const char* name, int64_t v) { view.set(args, name, view.integer(v)); };
    for (const char* k : {"tensor_model_parallel_size", "pipeline_model_parallel_size", "expert_model_parallel_size",
                          "virtual_pipeline_model_parallel_size", "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads",
                          "num_query_groups", "max_position_embeddings"})
        if (auto v = integer(k)) put(k, *v);
    if (auto e = integer("num_moe_experts")) put("num_experts", *e);
    if (auto v = integer("vocab_size")) put("vocab_size", *v);
    if (auto g = integer("num_query_groups"); g && *g != integer("num_attention_heads").value_or(*g)) put("group_query_attention", 1);
    if (auto g = boolean("gated_linear_unit"); g && *g) put("swiglu", 1);  // NeMo 2's name for a gated MLP
    if (auto it = cfg.find("activation_func._target_"); it != cfg.end()) view.set(args, "activation", view.str(it->second));
    if (auto it = cfg.find("activation"); it != cfg.end()) {
        // NeMo's gated activations: fc1 holds the gate and the value halves, split per rank as SwiGLU's (megatron's `swiglu` join)
        static const std::set<std::string> gated = {"swiglu", "fast-swiglu", "geglu", "fast-geglu", "reglu", "fast-reglu"};
        put("swiglu", gated.count(it->second) > 0);
        view.set(args, "activation", view.str(it->second));
    }
    // NeMo's GPT ties them unless told otherwise (megatron_gpt_model.py: share_embeddings_and_output_weights, default True).
    put("untie_embeddings_and_output_weights", !boolean("share_embeddings_and_output_weights").value_or(true));
    if (auto sp = boolean("sequence_parallel")) put("sequence_parallel", *sp);
    for (const char* k : {"normalization", "position_embedding_type"})
        if (auto it = cfg.find(k); it != cfg.end()) view.set(args, k, view.str(it->second));
    return args;
}

// The weights file of (tp, pp) as NLPSaveRestoreConnector names it.
std::string weights_of(int tp, int pp, const DistInfo::Degrees& d) {
    char b[64];
    if (d.tensor == 1 && d.pipeline == 1) return k_weights;
    if (d.pipeline == 1) std::snprintf(b, sizeof b, "mp_rank_%02d/", tp);
    else std::snprintf(b, sizeof b, "tp_rank_%02d_pp_rank_%03d/", tp, pp);
    return b + std::string(k_weights);
}

}  // namespace

// NeMo 2: the checkpoint folder (weights/ and context/), or its weights/ folder given alone.
std::string nemo2_folder(const std::string& path) {
    if (!dist::is_dir(path)) return "";
    auto is_nemo2 = [](const std::string& d) { return dist::is_file(d + "/weights/metadata.json") && dist::is_file(d + "/context/model.yaml"); };
    if (is_nemo2(path)) return path;
    std::string up = text::parent_dir(path);
    if (text::base_name(path) == "weights" && is_nemo2(up)) return up;
    return "";
}

bool nemo_input(const std::string& path) {
    if (dist::is_file(path)) return text::ends_with(path, ".nemo");
    if (!nemo2_folder(path).empty()) return true;
    if (!dist::is_dir(path) || !dist::is_file(path + "/" + k_config)) return false;
    return dist::is_file(path + "/" + k_weights) || dist::is_file(path + "/mp_rank_00/" + k_weights) ||
           dist::is_file(path + "/tp_rank_00_pp_rank_000/" + k_weights) || dist::is_dir(path + "/model_weights");
}

namespace {

std::unique_ptr<Checkpoint> open_nemo2(const std::string& top, const std::string& given, const OpenOptions& options) {
    const std::string dir = top + "/weights", yaml = top + "/context/model.yaml";
    auto contents = dist_contents(given, dir, "megatron-nemo2");
    Checkpoint::Contents* c = contents.get();
    DistInfo& info = *c->dist;
    std::map<std::string, std::string> cfg;
    for (auto& [k, v] : yaml_scalars(read_text_file(yaml, 16u << 20, "model.yaml"), yaml))
        if (text::starts_with(k, "config.")) cfg[k.substr(7)] = v;
    if (cfg.empty()) throw Error(ErrorKind::format, yaml, "holds no `config:` mapping: not a NeMo 2 model's context");
    DistView view(*c, options);
    Value* args = args_from_config(view, cfg, yaml);
    Value* root = view.dict();
    std::optional<int64_t> vocab;
    open_torch_dist(view, dir, root, vocab, args, "module.");
    info.layout = "megatron-nemo2";
    info.writer = "NeMo 2 (weights/ in torch_dist, the config in context/model.yaml)";
    info.files.push_back("../context/model.yaml");
    info.notes.push_back("names as stored: module.… (MegatronParallel's), the layer norms where TransformerEngine's spec keeps them "
                         "(inside linear_qkv / linear_fc1), which NeMo 2's default GPT models use");
    if (options.unpad_vocab) unpad(*c, root, *options.unpad_vocab ? *options.unpad_vocab : vocab.value_or(0), dir);
    view.finish(root, "model");
    return std::make_unique<Checkpoint>(std::move(contents));
}

}  // namespace

std::unique_ptr<Checkpoint> open_nemo(const std::string& path, const OpenOptions& options) {
    if (std::string top = nemo2_folder(path); !top.empty()) return open_nemo2(top, path, options);
    auto contents = dist_contents(path, path, "megatron-nemo");
    Checkpoint::Contents* c = contents.get();
    DistInfo& info = *c->dist;
    Nemo nemo = read_nemo(path);
    if (!nemo.has(k_config)) throw Error(ErrorKind::format, path, std::string("holds no ") + k_config + ": not a .nemo model");
    const std::string config_path = path + "/" + k_config;
    std::map<std::string, std::string> cfg = yaml_scalars(nemo.text(k_config), config_path);
    info.files.push_back(k_config);
    if (nemo.has_dir("model_weights"))
        throw Error(ErrorKind::unsupported, path,
                    "holds its weights as a distributed checkpoint (model_weights/, torch_dist or zarr): not read yet (extract the .nemo with tar xf "
                    "and `ckpt-tool inspect` the model_weights folder for its tensors)");
    DistView view(*c, options);
    Args args{args_from_config(view, cfg, config_path)};
    DistInfo::Degrees d = degrees_of(args);
    if (d.tensor < 1 || d.pipeline < 1 || d.expert < 1 || d.virtual_pipeline < 1 || d.tensor > 4096 || d.pipeline > 4096)
        throw Error(ErrorKind::corrupt, config_path, "holds model-parallel degrees out of range");
    if (d.expert > 1 || d.virtual_pipeline > 1)
        throw Error(ErrorKind::unsupported, config_path,
                    std::string(d.expert > 1 ? "expert" : "virtual pipeline") +
                        " parallelism in a .nemo of per-rank weights files: not read yet (NeMo names their chunks otherwise)");
    info.parallel = d;
    describe_model(args, info);
    RankFiles set{args, d, {}, config_path};
    for (int pp = 0; pp < d.pipeline; ++pp)
        for (int tp = 0; tp < d.tensor; ++tp) {
            RankFile f;
            f.tp = tp, f.pp = pp, f.rel = weights_of(tp, pp, d);
            if (!nemo.has(f.rel))
                throw Error(ErrorKind::corrupt, path + "/" + f.rel,
                            "is missing: " + std::string(k_config) + " says TP " + std::to_string(d.tensor) + " × PP " + std::to_string(d.pipeline) + " (" +
                                std::to_string(d.tensor * d.pipeline) + " weights files)");
            f.part = nemo.open(view, f.rel);
            info.files.push_back(f.rel);
            info.bytes += f.part->file_size();
            add_chunk(f, f.part->root());
            set.files.push_back(std::move(f));
        }
    // Files beside them that another degree would have written: a save of another run mixed in.
    static const std::regex other(R"((mp_rank_\d+|tp_rank_\d+_pp_rank_\d+)/model_weights\.ckpt|model_weights\.ckpt)");
    auto check_stray = [&](const std::string& rel) {
        if (std::regex_match(rel, other) && std::none_of(set.files.begin(), set.files.end(), [&](const RankFile& f) { return f.rel == rel; }))
            throw Error(ErrorKind::corrupt, path + "/" + rel,
                        "is not a weights file of this model: " + std::string(k_config) + " says TP " + std::to_string(d.tensor) + " × PP " +
                            std::to_string(d.pipeline) + ", whose files are named like " + weights_of(0, 0, d));
    };
    if (nemo.tar)
        for (const auto& [rel, m] : nemo.members) check_stray(rel);
    else
        for (const std::string& n : dist::list_dir(path)) {
            if (n == k_weights) check_stray(n);
            else if (dist::is_file(path + "/" + n + "/" + k_weights)) check_stray(n + "/" + k_weights);
        }
    info.world_size = d.tensor * d.pipeline;
    info.writer = std::string("NeMo (") + (nemo.tar ? ".nemo" : "an extracted .nemo") + ", per-rank weights files" +
                  (cfg.count("mcore_gpt") && (cfg.at("mcore_gpt") == "True" || cfg.at("mcore_gpt") == "true") ? ", Megatron-Core model" : "") + ")";
    Value* root = view.dict();
    Value* model = view.dict(true);
    join_rank_files(view, path, model, set);
    view.set(root, "model", model);
    if (args.b("sequence_parallel"))
        info.notes.push_back("sequence parallelism: the replicated norms and biases can drift apart across tensor-parallel ranks; verify compares them");
    if (options.unpad_vocab) {
        if (!*options.unpad_vocab)
            throw Error(ErrorKind::usage, path, "--unpad-vocab: a .nemo records no vocabulary size (its tokenizer does); give it (--unpad-vocab N)");
        unpad(*c, root, *options.unpad_vocab, path);
    }
    view.finish(root, "model");
    return std::make_unique<Checkpoint>(std::move(contents));
}

}  // namespace ckpt
