#include "ckpt/inspect.hpp"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "ckpt/error.hpp"
#include "model/keys.hpp"
#include "model/optimizer.hpp"
#include "ckpt/report.hpp"
#include "base/text_util.hpp"
#include "formats/deepspeed_folder.hpp"
#include "formats/dist.hpp"
#include "base/huge_pages.hpp"

namespace ckpt {

void Totals::add(const TensorInfo& t, uint64_t nbytes) {
    ++tensors;
    elements += t.numel;
    bytes += nbytes;
    std::string_view name = dtype_name(t.dtype);
    for (auto& d : by_dtype)
        if (d.dtype == name) {
            ++d.tensors;
            d.elements += t.numel;
            d.bytes += nbytes;
            return;
        }
    by_dtype.push_back({std::string(name), 1, t.numel, nbytes});
}

bool InspectReport::listed(const TensorRow& row) const {
    if (options.key_globs.empty()) return true;
    return any_glob_matches(options.key_globs, row.key) ||
           (row.name && any_glob_matches(options.key_globs, *row.name));
}

namespace {

OptimizerSummary summarise(const OptimizerRef& o) {
    OptimizerSummary s;
    s.key = o.key;
    const Value* state = o.state();
    const Value* groups = o.param_groups();
    s.param_groups = groups->items().size();
    s.states = state->dict_size();
    for (const Value* g : groups->items()) {
        if (g->kind != ValueKind::dict) continue;
        if (const Value* p = g->get("params")) s.params += p->items().size();
    }
    if (!groups->items().empty() && groups->items()[0]->kind == ValueKind::dict) {
        const Value* g = groups->items()[0];
        std::string h;
        for (size_t i = 0; i < g->dict_size(); ++i) {
            std::string k = key_part(g->dict_key(i));
            if (k == "params" || k == "param_names") continue;
            if (!h.empty()) h += ", ";
            h += k + "=" + repr(g->dict_value(i), 40, 3);
        }
        s.hyperparameters = h;
    }
    if (s.states > 0 && state->dict_value(0)->kind == ValueKind::dict) {
        const Value* first = state->dict_value(0);
        for (size_t i = 0; i < first->dict_size(); ++i) s.state_fields.push_back(key_part(first->dict_key(i)));
    }
    return s;
}


// What saved keys that start with `wp` (module. and _orig_mod., the outermost first): each
// attribute is the wrapper around the rest, so "_orig_mod.module." is torch.compile(DDP(model)) and
// "module._orig_mod." DDP(torch.compile(model)).
std::string wrapper_origin(const std::string& wp) {
    std::vector<bool> compiled;  // from the outermost
    for (size_t at = 0; at < wp.size();) {
        size_t dot = wp.find('.', at);
        compiled.push_back(wp.compare(at, dot - at, "_orig_mod") == 0);
        at = dot + 1;
    }
    if (compiled.size() == 1)
        return compiled[0] ? "saved from a torch.compile'd model" : "saved from a DDP/DataParallel wrapper";
    std::string expr = "model", story = "the model";
    for (size_t i = compiled.size(); i-- > 0;) {
        expr = std::string(compiled[i] ? "torch.compile" : "DDP") + "(" + expr + ")";
        story += std::string(i + 1 == compiled.size() ? " " : ", then ") +
                 (compiled[i] ? "compiled with torch.compile" : "wrapped in DDP/DataParallel");
    }
    return "saved from " + expr + ": " + story;
}

void add_prefix_hints(const Checkpoint& c, InspectReport& r) {
    const StateDict& sd = c.state_dict();
    std::vector<std::string_view> names;
    names.reserve(sd.entries.size());
    for (const auto& e : sd.entries) names.push_back(e.name);
    if (names.empty()) return;
    std::string n = std::to_string(names.size());
    std::string wp = wrapper_prefix(names);
    if (!wp.empty()) {
        // The other state dicts saved beside it with the same prefix (ema …): strip-prefix renames them too.
        std::string also;
        auto others = other_state_dicts(c, [&](const auto& keys) { return wrapper_prefix(keys) == wp; });
        for (const OtherStateDict& o : others) also += (also.empty() ? "" : ", ") + ("\"" + o.name + "\"");
        if (!others.empty())
            also = "; " + also + (others.size() == 1 ? " carries it too, and the command renames both" : " carry it too, and the command renames them all");
        r.hints.push_back({"wrapper_prefix", "all " + n + " keys start with \"" + wp + "\" (" + wrapper_origin(wp) + ")" + also,
                           strip_prefix_command(c.path(), sd.path, {}, "")});
        return;
    }
    // The state dict is clean, but another saved beside it is not (ema stripped by hand, or forgotten).
    for (const OtherStateDict& o : other_state_dicts(c, [](const auto& keys) { return !wrapper_prefix(keys).empty(); })) {
        std::string owp = wrapper_prefix(o.keys);
        r.hints.push_back({"wrapper_prefix", "the keys of \"" + o.name + "\" (" + std::to_string(o.keys.size()) + ") all start with \"" + owp +
                                                 "\" (" + wrapper_origin(owp) + "), those of \"" + sd.path + "\" do not",
                           strip_prefix_command(c.path(), o.name, {}, "")});
    }
    std::string lead = common_leading_component(names);
    if (!lead.empty()) {
        std::string why = lead == "model." ? " (a LightningModule's `model` attribute?)" : "";
        r.hints.push_back({"common_prefix", "all " + n + " keys start with \"" + lead + "\"" + why,
                           strip_prefix_command(c.path(), sd.path, {lead}, "")});
    }
}

}  // namespace

InspectReport inspect(const Checkpoint& c, const InspectOptions& options) {
    std::vector<Problem> frames = c.frame_problems();
    if (!frames.empty()) {
        std::string more = frames.size() > 1 ? " (and " + std::to_string(frames.size() - 1) + " more records)" : "";
        throw Error(ErrorKind::corrupt, c.path(),
                    frames.front().message + more + (frames.size() > 1 ? ": the file holds parts of two saves (" : ": another save wrote there? (") +
                        k_two_writers_advice + "); 'ckpt-tool verify " + c.path() + "' lists every finding");
    }
    if (!c.problems().empty()) {
        const Problem& p = c.problems().front();
        std::string more = c.problems().size() > 1
                               ? " (and " + std::to_string(c.problems().size() - 1) + " more problems)"
                               : "";
        throw Error(ErrorKind::corrupt, c.path(), p.message + more);
    }
    InspectReport r;
    r.checkpoint = &c;
    r.options = options;

    std::vector<const std::string_view*> sd_name(c.entries().size());  // entry index → state dict name
    for (const auto& e : c.state_dict().entries)
        if (!sd_name[e.entry]) sd_name[e.entry] = &e.name;
    std::vector<size_t> users = c.storage_users();
    r.tensors.reserve(c.tensors().size());
    advise_huge_pages(r.tensors);

    std::vector<char> counted_all(c.tensors().size());  // a tensor object at two keys counts once
    for (size_t i = 0; i < c.entries().size(); ++i) {
        const Entry& e = c.entries()[i];
        if (!e.tensor) {
            r.objects.push_back({std::string(e.key), type_name(e.value), repr(e.value, 300)});
            continue;
        }
        const TensorInfo& t = c.tensors()[*e.tensor];
        TensorRow row;
        row.key = e.key;
        row.tensor = static_cast<uint32_t>(*e.tensor);
        row.shared = t.strided_view() && users[t.storage] > 1;
        if (sd_name[i]) {
            row.name = sd_name[i];
            r.state_dict_totals.add(t, c.tensor_bytes(t));  // per key: what load_state_dict sees
        }
        if (!counted_all[*e.tensor]) {
            counted_all[*e.tensor] = 1;
            r.all_totals.add(t, c.tensor_bytes(t));
        }
        r.tensors.push_back(std::move(row));
    }
    for (const auto& s : c.storages()) r.storage_bytes += s.nbytes();

    for (const OptimizerRef& o : find_optimizers(c.root())) r.optimizers.push_back(summarise(o));
    DistFileHint dist_hint = dist_file_hint(c);  // formats/dist.cpp
    if (dist_hint.kind != "fsdp_local") add_prefix_hints(c, r);  // flat parameters lose nothing by a prefix
    std::string save;
    if (std::string dir = sharded_folder_of(c.path(), &save); !dir.empty())
        r.hints.push_back({text::starts_with(save, "DeepSpeed") ? "deepspeed_rank_file" : "megatron_rank_file",
                           "one rank's file of a " + save + ": `ckpt-tool inspect " + shell_quote(dir) + "` shows the merged model",
                           "ckpt-tool merge " + shell_quote(dir) + " -o model.pth"});
    if (!dist_hint.kind.empty()) r.hints.push_back({dist_hint.kind, "this file " + dist_hint.message, ""});
    // Storages saved on an accelerator: torch.load puts them back there, and fails where there is none.
    std::vector<std::string> devices;
    size_t on_device = 0;
    for (const StorageInfo& s : c.storages())
        if (!s.location.empty() && s.location != "cpu") {
            ++on_device;
            if (std::find(devices.begin(), devices.end(), s.location) == devices.end()) devices.emplace_back(s.location);
        }
    if (on_device) {
        std::string where;
        for (size_t i = 0; i < devices.size() && i < 4; ++i) where += (i ? ", " : "") + devices[i];
        r.hints.push_back({"device_storages", std::to_string(on_device) + " of " + std::to_string(c.storages().size()) +
                                                  " storages were saved on " + where +
                                                  ": on a machine without that device, torch.load needs map_location=\"cpu\" (with "
                                                  "weights_only or without)", ""});
    }
    if (c.state_dict().kind == StateDictKind::none && !r.tensors.empty())
        r.hints.push_back({"no_state_dict",
                           "no mapping of names to tensors found; name one with --state-dict-key", ""});

    if (std::vector<size_t> left = c.unreferenced_records(); !left.empty())
        r.warnings.push_back({"unreferenced_records",
                              std::to_string(left.size()) + " record" + (left.size() == 1 ? "" : "s") + " under data/ (" +
                                  std::string(c.records()[left.front()].name) + (left.size() == 1 ? "" : " …") +
                                  ")" + (left.size() == 1 ? " is" : " are") + " no tensor's storage: left by another save? (" + k_two_writers_advice +
                                  "); 'ckpt-tool verify " + c.path() + "' checks every byte"});
    r.weights_only = weights_only_answers(c, &frames);
    for (const auto& g : c.globals()) {
        r.globals.push_back(judge(*options.policy, g));
        const GlobalVerdict& v = r.globals.back();
        if (global_is_known(v.cls)) continue;
        if (v.cls == GlobalClass::dangerous)
            r.warnings.push_back({"dangerous_global",
                                  "global " + g.full_name() + " would run code if torch.load unpickled this "
                                  "file (at byte " + std::to_string(g.first_offset) + " of " + g.record + "): " + v.reason +
                                  "; ckpt-tool scan says more"});
        else
            r.warnings.push_back({"unknown_global",
                                  "global " + g.full_name() + " is not on the allow-list (a custom class?): "
                                  "torch.load(weights_only=True) would refuse this file; --allow it if you trust it"});
    }
    return r;
}

}  // namespace ckpt
