#include "ckpt/diff_keys.hpp"

#include <algorithm>
#include <unordered_set>

#include "ckpt/error.hpp"
#include "commands/diff_keys_detail.hpp"
#include "base/string_index.hpp"
#include "model/keys.hpp"
#include "io/mapped_file.hpp"
#include "ckpt/report.hpp"
#include "io/json.hpp"
#include "stats/torch_backend.hpp"

namespace ckpt {

namespace {

using detail::fixed_name;
using detail::module_of;
using text::starts_with;

[[noreturn]] void not_manifest(const std::string& path, const std::string& why) {
    throw Error(ErrorKind::format, path, "not a key manifest: " + why);
}

std::string entry_at(size_t n) { return "entry " + std::to_string(n) + ": "; }

// Adds the manifest's entry `e` (the n-th) to `ks`.
void add_manifest_entry(KeySet& ks, const nlohmann::json& e, size_t n) {
    const std::string& path = ks.path;
    if (e.is_string()) {
        ks.add(e.get_ref<const std::string&>());
        return;
    }
    if (!e.is_object()) not_manifest(path, entry_at(n) + "neither a key nor an object");
    const nlohmann::json* name = e.contains("key") ? &e["key"] : e.contains("name") ? &e["name"] : nullptr;
    if (!name || !name->is_string()) not_manifest(path, entry_at(n) + "no \"key\" string");
    std::optional<Dims> shape;
    if (e.contains("shape") && !e["shape"].is_null()) {
        const auto& s = e["shape"];
        if (!s.is_array()) not_manifest(path, entry_at(n) + "\"shape\" is not a list");
        shape.emplace();
        for (const auto& d : s) {
            if (!d.is_number_integer() || d.get<int64_t>() < 0)
                not_manifest(path, entry_at(n) + "\"shape\" holds something other than non-negative integers");
            shape->push_back(d.get<int64_t>());
        }
    }
    std::string_view dtype;
    if (e.contains("dtype") && !e["dtype"].is_null()) {
        if (!e["dtype"].is_string()) not_manifest(path, entry_at(n) + "\"dtype\" is not a string");
        std::string_view d = e["dtype"].get_ref<const std::string&>();
        if (starts_with(d, "torch.")) d.remove_prefix(6);
        if (!dtype_from_name(d)) not_manifest(path, entry_at(n) + "unknown dtype \"" + std::string(d) + "\"");
        dtype = ks.text.keep(d);
    }
    ks.add(name->get_ref<const std::string&>(), dtype, std::move(shape));
}

KeySet read_manifest(const std::string& path, const nlohmann::json& j) {
    KeySet ks;
    ks.path = path;
    ks.kind = "manifest";
    std::string command = json_string_or(j, "command");
    if ((command == "fingerprint" || command == "verify") && j.contains("tensors") && j["tensors"].is_array()) {
        // A fingerprint (verify --write-fingerprint) or verify --json: every row is a key.
        size_t n = 0;
        for (const auto& t : j["tensors"]) {
            ++n;
            if (json_string_or(t, "status") == "missing") continue;  // the reference's, not this file's
            add_manifest_entry(ks, t, n);
        }
    } else if (j.is_object() && j.contains("tensors") && j["tensors"].is_array()) {
        // `ckpt-tool inspect --json`: the state dict's tensors are the ones with a state_dict_key.
        if (j.contains("state_dict") && j["state_dict"].is_string()) ks.state_dict_path = j["state_dict"];
        size_t n = 0;
        for (const auto& t : j["tensors"]) {
            ++n;
            if (!t.is_object() || !t.contains("state_dict_key") || !t["state_dict_key"].is_string()) continue;
            nlohmann::json e = t;
            e["key"] = t["state_dict_key"];
            add_manifest_entry(ks, e, n);
        }
        if (ks.keys.empty()) not_manifest(path, "an inspect report with no state-dict tensors");
    } else {
        const nlohmann::json* list = j.is_array() ? &j : nullptr;
        if (j.is_object() && j.contains("keys") && j["keys"].is_array()) list = &j["keys"];
        if (!list) not_manifest(path, "expected a JSON list of {key, shape, dtype}, {\"keys\": [...]}"
                                      " or the output of inspect --json");
        size_t n = 0;
        for (const auto& e : *list) add_manifest_entry(ks, e, ++n);
    }
    std::unordered_set<std::string_view> seen;
    for (size_t i = 0; i < ks.keys.size(); ++i)
        if (!seen.insert(ks.keys[i].name).second)
            not_manifest(path, entry_at(i + 1) + "key \"" + std::string(ks.keys[i].name) + "\" appears twice");
    return ks;
}

}  // namespace

KeySet key_set_of(const Checkpoint& c) {
    const StateDict& sd = c.state_dict();
    if (sd.kind == StateDictKind::none)
        throw Error(ErrorKind::usage, c.path(),
                    "no state dict (a mapping of names to tensors) found; name it with --state-dict-key");
    KeySet ks;
    ks.path = c.path();
    ks.kind = "checkpoint";
    ks.state_dict_path = sd.path;
    auto add = [&](std::string_view name, const Value* v) {
        if (v && v->kind == ValueKind::tensor) {
            const TensorInfo& t = c.tensors()[static_cast<size_t>(v->i())];
            ks.add(name, dtype_name(t.dtype), t.shape);
        } else {
            ks.add(name);
        }
    };
    if (sd.kind == StateDictKind::dict) {
        // Every string key: load_state_dict sees the non-tensor ones (`_extra_state`) too.
        ks.keys.reserve(sd.value->dict_size());
        for (size_t i = 0; i < sd.value->dict_size(); ++i)
            if (sd.value->dict_key(i)->kind == ValueKind::string) add(sd.value->dict_key(i)->s(), sd.value->dict_value(i));
    } else {
        ks.keys.reserve(sd.entries.size());
        for (const auto& e : sd.entries) add(e.name, c.entries()[e.entry].value);
    }
    return ks;
}

KeySet read_key_set(const std::string& path, const OpenOptions& open) {
    if (!is_sharded_index(path))
        if (auto j = read_json_file(path)) return read_manifest(path, *j);
    std::unique_ptr<Checkpoint> c = Checkpoint::open(path, open);
    if (c->format() != Format::torchscript) return key_set_of(*c);
    // A TorchScript model: its named parameters and buffers as torch::jit::load gives them, in a
    // process of its own (torchscript_tensors); a damaged archive never reaches it.
    refuse_damaged_torchscript(*c, path);
    KeySet ks;
    ks.path = path;
    ks.kind = "torchscript";
    for (NamedTensor& t : torchscript_tensors(path, false)) ks.add(t.name, ks.text.keep(t.dtype), Dims(t.shape));
    return ks;
}

namespace {

// One side's keys, indexed by name (the first of a name): a StringIndex over the KeyInfos' own
// names, where a map of strings copied 100,000 names and was an eighth of diff-keys' time.
struct Side {
    std::vector<const KeyInfo*> keys;
    StringIndex by_name;
    auto name_at() const {
        return [this](size_t i) -> std::string_view { return keys[i]->name; };
    }
    const KeyInfo* find(std::string_view name) const {
        size_t pos = by_name.find(name, name_at());
        return pos == StringIndex::npos ? nullptr : keys[pos];
    }
};

Side filtered(const KeySet& ks, const std::vector<std::string>& ignore, size_t& ignored) {
    Side s;
    s.keys.reserve(ks.keys.size());
    s.by_name.reserve(ks.keys.size());
    for (const auto& k : ks.keys) {
        if (any_glob_matches(ignore, k.name)) {
            ++ignored;
            continue;
        }
        s.keys.push_back(&k);
        s.by_name.insert(k.name, s.keys.size() - 1, s.name_at());
    }
    return s;
}

bool shapes_differ(const KeyInfo& a, const KeyInfo& b) { return a.shape && b.shape && *a.shape != *b.shape; }

// Prefixes worth trying on one side: "" and every leading dotted path (up to four parts) that at
// least half of the keys carry. At each depth, at most two prefixes are that common: the
// Misra-Gries summary with two counters holds every one carried by more than a third of the keys,
// and a second pass counts those. No table of every prefix (a map of 200,000 nodes for 100,000 keys).
std::vector<std::string> candidate_prefixes(const std::vector<const KeyInfo*>& keys) {
    // The key's leading path of depth + 1 parts, with its dot ("" when it has no more parts).
    auto prefix = [](std::string_view name, int depth) -> std::string_view {
        size_t dot = 0;
        for (int d = 0; d <= depth; ++d) {
            dot = name.find('.', dot);
            if (dot == std::string_view::npos || dot + 1 == name.size()) return {};
            ++dot;
        }
        return name.substr(0, dot);
    };
    std::vector<std::pair<size_t, std::string>> common;
    for (int depth = 0; depth < 4; ++depth) {
        std::string_view held[2];
        size_t weight[2] = {0, 0};
        for (const KeyInfo* k : keys) {
            std::string_view p = prefix(k->name, depth);
            if (p.empty()) continue;
            if (weight[0] && held[0] == p) ++weight[0];
            else if (weight[1] && held[1] == p) ++weight[1];
            else if (!weight[0]) held[0] = p, weight[0] = 1;
            else if (!weight[1]) held[1] = p, weight[1] = 1;
            else --weight[0], --weight[1];
        }
        size_t n[2] = {0, 0};
        bool two = weight[1] && !(weight[0] && held[0] == held[1]);
        for (const KeyInfo* k : keys) {
            std::string_view p = prefix(k->name, depth);
            if (p.empty()) continue;
            if (weight[0] && p == held[0]) ++n[0];
            else if (two && p == held[1]) ++n[1];
        }
        for (int c = 0; c < 2; ++c)
            if (n[c] && 2 * n[c] >= keys.size()) common.push_back({n[c], std::string(held[c])});
    }
    std::sort(common.begin(), common.end(), [](const auto& x, const auto& y) {
        return x.first != y.first ? x.first > y.first : x.second < y.second;
    });
    std::vector<std::string> out{""};
    for (size_t i = 0; i < common.size() && i < 16; ++i) out.push_back(common[i].second);
    return out;
}

// How well "strip `strip` where present, then add `add`" makes `a` fit `b`; nullopt when it would
// give two keys one name (strip-prefix would refuse it).
std::optional<PrefixFix> evaluate(const Side& a, const Side& b, const std::string& strip, const std::string& add) {
    PrefixFix f;
    f.strip = strip;
    f.add = add;
    auto renamed = [&](std::string& out, std::string_view k) { return fixed_name(out, k, strip, add); };
    std::string name, other;
    StringIndex names;  // the new names so far, each by its key's position (made again to compare)
    names.reserve(a.keys.size());
    auto new_name_at = [&](size_t i) -> std::string_view { return renamed(other, a.keys[i]->name); };
    for (size_t i = 0; i < a.keys.size(); ++i) {
        const KeyInfo* k = a.keys[i];
        std::string_view n = renamed(name, k->name);
        if (const KeyInfo* r = b.find(n)) {
            ++f.matched;
            f.shape_mismatch += shapes_differ(*k, *r);
        } else {
            ++f.unexpected;
        }
        if (!names.insert(n, i, new_name_at).second) return std::nullopt;
    }
    f.missing = b.keys.size() - f.matched;
    return f;
}

// What the fix leaves: the keys still missing or unexpected, and the shapes that still differ.
void fill_residue(const Side& a, const Side& b, PrefixFix& f) {
    std::string name;
    std::vector<char> hit(b.keys.size());
    for (const KeyInfo* k : a.keys) {
        std::string_view n = fixed_name(name, k->name, f.strip, f.add);
        size_t pos = b.by_name.find(n, b.name_at());
        if (pos == StringIndex::npos) {
            f.residue_unexpected.emplace_back(n);
            continue;
        }
        hit[pos] = 1;
        if (shapes_differ(*k, *b.keys[pos])) f.residue_shape.push_back({std::string(n), *k->shape, *b.keys[pos]->shape});
    }
    for (const KeyInfo* k : b.keys)
        if (!hit[b.by_name.find(k->name, b.name_at())]) f.residue_missing.emplace_back(k->name);
}

std::string shape_hint(const std::vector<ShapeMismatch>& shapes, const Side& reference) {
    if (shapes.empty()) return "";
    std::vector<std::string_view> modules;
    for (const auto& s : shapes)
        if (std::find(modules.begin(), modules.end(), module_of(s.key)) == modules.end()) modules.push_back(module_of(s.key));
    std::string cause, keep;
    if (modules.size() == 1 && !modules.front().empty()) {
        std::string m(modules.front());
        bool last = !reference.keys.empty() && module_of(reference.keys.back()->name) == modules.front();
        bool outputs = std::all_of(shapes.begin(), shapes.end(), [](const ShapeMismatch& s) {
            return !s.shape.empty() && s.shape.size() == s.reference_shape.size() && s.shape[0] != s.reference_shape[0] &&
                   std::equal(s.shape.begin() + 1, s.shape.end(), s.reference_shape.begin() + 1);
        });
        if (last && outputs)
            cause = m + " has " + std::to_string(shapes.front().shape[0]) + " outputs, the reference's " +
                    std::to_string(shapes.front().reference_shape[0]) + ": the last layer of another number of classes?";
        else
            cause = "the shapes of " + m + " differ: the same model of another size?";
        keep = "if not k.startswith(\"" + m + ".\")";
    } else {
        cause = std::to_string(shapes.size()) + " shapes differ in " + std::to_string(modules.size()) + " modules: another configuration of the model?";
        std::string names;
        for (size_t i = 0; i < shapes.size() && i < 4; ++i) names += (i ? ", \"" : "\"") + shapes[i].key + "\"";
        keep = shapes.size() <= 4 ? "if k not in {" + names + "}" : "if k not in mismatched";
    }
    return cause + " load_state_dict refuses a shape that differs, even with strict=False; to load the rest: "
                   "model.load_state_dict({k: v for k, v in sd.items() " + keep + "}, strict=False)";
}

bool better(const PrefixFix& x, const PrefixFix& y) {
    if (x.matched != y.matched) return x.matched > y.matched;
    if (x.shape_mismatch != y.shape_mismatch) return x.shape_mismatch < y.shape_mismatch;
    return x.strip.size() + x.add.size() < y.strip.size() + y.add.size();
}

}  // namespace

KeyDiff diff_keys(const KeySet& file, const KeySet& reference, const DiffOptions& options) {
    KeyDiff d;
    d.file = file.path;
    d.reference = reference.path;
    d.strict_dtype = options.strict_dtype;
    Side a = filtered(file, options.ignore, d.ignored);
    Side b = filtered(reference, options.ignore, d.reference_ignored);
    d.keys = a.keys.size();
    d.reference_keys = b.keys.size();
    std::vector<const KeyInfo*> a_left, b_left;  // the keys of each side the other lacks
    for (const KeyInfo* k : a.keys) {
        const KeyInfo* found = b.find(k->name);
        if (!found) {
            d.unexpected.emplace_back(k->name);
            a_left.push_back(k);
            continue;
        }
        ++d.matched;
        const KeyInfo& r = *found;
        if (shapes_differ(*k, r)) d.shape_mismatch.push_back({std::string(k->name), *k->shape, *r.shape});
        if (!k->dtype.empty() && !r.dtype.empty() && k->dtype != r.dtype)
            d.dtype_mismatch.push_back({std::string(k->name), std::string(k->dtype), std::string(r.dtype)});
    }
    for (const KeyInfo* k : b.keys)
        if (!a.find(k->name)) {
            d.missing.emplace_back(k->name);
            b_left.push_back(k);
        }

    d.shape_hint = shape_hint(d.shape_mismatch, b);
    if (d.missing.empty() && d.unexpected.empty()) return d;
    // Prefixes carried by most keys, and by most of the keys that do not match (what a fix applied
    // to some keys only leaves: module.layers.9–11.* after the rest were stripped).
    auto both = [](std::vector<std::string> x, const std::vector<std::string>& y) {
        for (const auto& p : y)
            if (std::find(x.begin(), x.end(), p) == x.end()) x.push_back(p);
        return x;
    };
    std::optional<PrefixFix> best;
    for (const auto& strip : both(candidate_prefixes(a.keys), candidate_prefixes(a_left)))
        for (const auto& add : both(candidate_prefixes(b.keys), candidate_prefixes(b_left))) {
            if (strip == add) continue;  // "" / "": the keys as they are
            auto f = evaluate(a, b, strip, add);
            if (f && (!best || better(*f, *best))) best = f;
        }
    if (!best || best->matched <= d.matched) return d;
    if (!best->complete()) fill_residue(a, b, *best);  // a complete fix leaves nothing
    d.shape_hint = shape_hint(best->residue_shape, b);
    if (file.kind == "checkpoint") {
        std::vector<std::string_view> all;
        all.reserve(file.keys.size());
        for (const auto& k : file.keys) all.push_back(k.name);
        bool wrapper = best->add.empty() && best->strip == wrapper_prefix(all);
        best->command = strip_prefix_command(file.path, file.state_dict_path,
                                             wrapper || best->strip.empty() ? std::vector<std::string>{}
                                                                            : std::vector<std::string>{best->strip},
                                             best->add);
    }
    d.prefix_fix = best;
    return d;
}

}  // namespace ckpt
