#include "ckpt/merge.hpp"

#include <ostream>
#include <set>

#include "ckpt/error.hpp"
#include "ckpt/report.hpp"
#include "formats/deepspeed_folder.hpp"
#include "formats/dist.hpp"
#include "base/text_util.hpp"

namespace ckpt {

std::string strip_wrapper_prefixes(const std::string& key) {
    static const std::string_view k_wrappers[] = {"module", "_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod"};
    std::string out;
    size_t at = 0;
    while (at <= key.size()) {
        size_t dot = key.find('.', at);
        if (dot == std::string::npos) {  // the last part is the tensor's own name: never removed
            out += key.substr(at);
            break;
        }
        std::string_view part(key.data() + at, dot - at);
        bool wrapper = false;
        for (std::string_view w : k_wrappers) wrapper = wrapper || part == w;
        if (!wrapper) out.append(part).append(".");
        at = dot + 1;
    }
    return out;
}

namespace {

bool safetensors_output(const std::string& path) { return text::ends_with(path, ".safetensors"); }

}  // namespace

MergeReport merge(const MergeRequest& rq) {
    MergeReport r;
    r.input = rq.input;
    r.output = rq.output;
    r.dry_run = rq.dry_run;
    // One rank's file of a DeepSpeed folder stands for the folder; what one file of FSDP cannot be
    // merged into is refused with why.
    std::string folder = sharded_folder_of(rq.input);  // formats/dist.cpp
    std::unique_ptr<Checkpoint> c = Checkpoint::open(folder.empty() ? rq.input : folder, rq.open);
    if (!c->dist())
        if (DistFileHint h = dist_file_hint(*c); !h.kind.empty()) throw Error(ErrorKind::unsupported, rq.input, h.message);
    if (!c->problems().empty())
        throw Error(ErrorKind::corrupt, rq.input, "will not merge a damaged checkpoint: " + c->problems().front().message);
    r.dist = c->dist();
    if (rq.open.unpad_vocab && !(r.dist && text::starts_with(r.dist->layout, "megatron")))
        throw Error(ErrorKind::usage, rq.input, "--unpad-vocab cuts a Megatron-LM save's padded vocabulary; this is no Megatron folder");
    if (r.dist) r.notes = r.dist->notes;
    if (!folder.empty()) r.notes.insert(r.notes.begin(), rq.input + " is one rank's file: merged its folder " + folder);
    const StateDict& sd = c->state_dict();
    if (sd.kind == StateDictKind::none)
        throw Error(ErrorKind::usage, rq.input, "no state dict (a mapping of names to tensors) found; name it with --state-dict-key");

    ConvertRequest cv;
    cv.input = folder.empty() ? rq.input : folder;
    cv.output = rq.output;
    cv.open = rq.open;
    cv.dtype = rq.dtype;
    cv.max_shard_size = rq.shard_size;
    cv.verify = rq.verify;
    cv.force = rq.force;
    cv.allow_expansion = rq.allow_expansion;
    cv.progress = rq.progress;
    cv.weights_only = true;
    if (rq.strip_wrappers || !rq.strip.empty()) {
        std::vector<std::string> strip = rq.strip;
        bool wrappers = rq.strip_wrappers;
        cv.rename = [strip, wrappers](const std::string& key) {
            std::string k = wrappers ? strip_wrapper_prefixes(key) : key;
            for (bool again = true; again;) {  // every given prefix, as often as it leads
                again = false;
                for (const std::string& p : strip)
                    if (!p.empty() && text::starts_with(k, p) && k.size() > p.size()) {
                        k = k.substr(p.size());
                        again = true;
                    }
            }
            return k;
        };
    }
    bool safetensors = safetensors_output(rq.output);
    bool dcp = r.dist && r.dist->layout == "dcp";
    bool deepspeed = r.dist && text::starts_with(r.dist->layout, "deepspeed");
    bool megatron = r.dist && text::starts_with(r.dist->layout, "megatron");
    r.written = "state_dict";
    if (rq.optimizer) {
        if (megatron)
            throw Error(ErrorKind::unsupported, rq.input,
                        r.dist->layout == "megatron-nemo" ? "--optimizer: a .nemo holds the model's weights only, no optimizer state"
                        : r.dist->layout == "megatron-torch"
                            ? "--optimizer: Megatron's --ckpt-format torch keeps each rank's optimizer state keyed by position within its parameter "
                              "groups, which the files do not tie to names: not reshardable here"
                            : "--optimizer: the moments of a torch_dist save are merged by name (inspect lists them under optimizer_moments), "
                              "but Megatron's optimizer state_dict is not written yet: merge without --optimizer");
        if (!deepspeed)
            throw Error(ErrorKind::usage, rq.input,
                        dcp ? "--optimizer: a DCP folder's merge writes all the folder holds, its optimizer state with it"
                            : "--optimizer merges a DeepSpeed folder's optimizer partitions; this is no DeepSpeed folder");
        if (safetensors) throw Error(ErrorKind::usage, rq.output, "--optimizer writes a training checkpoint: name a .pth output");
        const Value* opt = c->root() ? c->root()->get("optimizer") : nullptr;
        if (!opt) {
            std::string why;
            for (const std::string& n : r.notes)
                if (text::starts_with(n, "optimizer state")) why = ": " + n;
            throw Error(ErrorKind::unsupported, rq.input, "has no optimizer state to merge" + why);
        }
        cv.tree = {{"model", "module"}, {"optimizer", "optimizer"}};
        r.written = "model+optimizer";
    } else if (dcp && !safetensors) {
        cv.tree = {{"*", "*"}};  // as dcp_to_torch_save: the whole nesting
        r.written = "tree";
    } else if (megatron && !safetensors && !cv.rename) {
        cv.tree = {{"*", sd.path + ".*"}};  // the state dict with its `_extra_state` values, which strict loading wants
    }
    if (!cv.tree.empty() && rq.shard_size) throw Error(ErrorKind::usage, rq.output, "--shard-size shards a state dict: write .safetensors, or leave out --optimizer");

    // The plan: what would be written.
    std::set<size_t> counted;
    auto count = [&](size_t t) {
        if (!counted.insert(t).second) return;
        const TensorInfo& ti = c->tensors()[t];
        ++r.tensors;
        DType d = rq.dtype && dtype_is_floating(ti.dtype) ? *rq.dtype : ti.dtype;
        r.tensor_bytes += ti.numel * dtype_size(d);
    };
    if (cv.tree.empty()) {
        for (const auto& e : sd.entries) count(*c->entries()[e.entry].tensor);
    } else {
        std::string scope = r.written == "tree" ? "" : sd.path;
        for (const Entry& e : c->entries())
            if (e.tensor && (scope.empty() || text::starts_with(e.key, "module.") || text::starts_with(e.key, "optimizer.")))
                count(*e.tensor);
    }
    if (cv.rename)
        for (const auto& e : sd.entries) {
            std::string n = cv.rename(std::string(e.name));
            if (n != e.name) r.renamed.push_back({n, std::string(e.name)});
        }
    if (rq.dry_run) return r;
    c.reset();  // convert opens it again, with the writer's options
    r.convert = convert(cv);
    r.renamed = r.convert->renamed;
    return r;
}

nlohmann::json to_json(const MergeReport& r) {
    nlohmann::json j = report_head("merge");
    j["input"] = r.input;
    j["output"] = r.output;
    if (r.dist) {
        const DistInfo& d = *r.dist;
        j["layout"] = d.layout;
        j["writer"] = d.writer;
        j["tag"] = d.tag.empty() ? nlohmann::json(nullptr) : nlohmann::json(d.tag);
        j["world_size"] = d.world_size;
        j["files"] = d.files;
    } else {
        j["layout"] = "single";
        j["writer"] = nullptr;
        j["tag"] = nullptr;
        j["world_size"] = nullptr;
        j["files"] = nlohmann::json::array({r.input});
    }
    j["written"] = r.written;
    j["tensors"] = r.tensors;
    j["tensor_bytes"] = r.tensor_bytes;
    nlohmann::json ren = nlohmann::json::array();
    for (const auto& [to, from] : r.renamed) ren.push_back({{"from", from}, {"to", to}});
    j["renamed"] = std::move(ren);
    j["notes"] = r.notes;
    j["dry_run"] = r.dry_run;
    j["outputs"] = r.convert ? nlohmann::json(r.convert->outputs) : nlohmann::json::array();
    j["bytes_written"] = r.convert ? r.convert->bytes_written : 0;
    j["dropped"] = r.convert ? nlohmann::json(r.convert->dropped) : nlohmann::json::array();
    j["skipped"] = r.convert ? nlohmann::json(r.convert->skipped) : nlohmann::json::array();
    j["verified"] = r.convert && r.convert->verified;
    return j;
}

void render_text(const MergeReport& r, std::ostream& out, const TextStyle& style) {
    Paint paint{style.color};
    if (r.dist) {
        const DistInfo& d = *r.dist;
        out << paint("1", r.input) << ": " << d.writer;
        if (!d.tag.empty()) out << ", tag " << shown(d.tag);
        out << ", " << d.world_size << (d.world_size == 1 ? " rank" : " ranks") << ", " << d.files.size() << " files\n";
    }
    if (r.dry_run) {
        out << "would write " << shown(r.output) << ": " << r.tensors << " tensors, " << human_bytes(r.tensor_bytes)
            << (r.written == "tree" ? " (the folder's whole nesting)" : r.written == "model+optimizer" ? " (model and optimizer)" : "")
            << " (--dry-run: nothing written)\n";
    } else if (r.convert) {
        render_text(*r.convert, out, style);
    }
    if (!r.renamed.empty()) {
        out << "  " << r.renamed.size() << " names renamed";
        for (size_t i = 0; i < r.renamed.size() && i < 3; ++i) out << (i ? ", " : ": ") << shown(r.renamed[i].second) << " → " << shown(r.renamed[i].first);
        out << (r.renamed.size() > 3 ? ", …\n" : "\n");
    }
    for (const std::string& n : r.notes) out << "  " << paint("33", "note") << " " << shown(n) << "\n";
}

}  // namespace ckpt
