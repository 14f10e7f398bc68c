// Megatron-LM's --ckpt-format torch_dist: a torch.distributed.checkpoint folder (read by dcp.cpp's
// read_dcp) whose per-layer tensors are stacked [L, …] under keys without the layer number, renamed
// into the state dict of a TP=1 / PP=1 run; common.pt (or a common_state item) holds args.
#include <algorithm>
#include <map>
#include <regex>
#include <set>

#include "base/text_util.hpp"
#include "ckpt/error.hpp"
#include "formats/dist.hpp"
#include "formats/megatron.hpp"
#include "model/contents.hpp"
#include "io/json.hpp"

namespace ckpt::megatron {

using dist::field;
using dist::int_of;
using dist::str_of;

void open_torch_dist(DistView& view, const std::string& dir, Value* root, std::optional<int64_t>& vocab, const Value* given_args,
                     const std::string& pre) {
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
    if (!args.v) args.v = given_args;
    if (!args.v) throw Error(ErrorKind::corrupt, dir + "/common.pt", "holds no `args`: the model's shape is unknown");
    info.parallel = degrees_of(args);
    vocab = args.i("vocab_size");
    info.iteration = int_of(field(common, "iteration"));
    if (!info.iteration) info.iteration = int_of(field(common, "global_step"));  // NeMo 2: Lightning's step
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
        return text::starts_with(n, pre + "embedding.") ? 0 : tail;
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
        const std::string stack = pre + "decoder.layers.";
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
            const std::string stack = pre + "decoder.layers.";
            if (text::ends_with(base, "._extra_state") && text::starts_with(base, stack) && std::regex_match(shard, m, layer_shard) &&
                num_layers && std::stoll(m[2]) == *num_layers) {
                int64_t l = std::stoll(m[1]);
                std::string name = stack + std::to_string(l) + "." + base.substr(stack.size());
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

}  // namespace ckpt::megatron
