// Finding the state dict in a read checkpoint's value tree: a --state-dict-key, a pickled nn.Module
// (names as state_dict() gives them), the top-level mapping or one under a well-known key, the largest
// mapping of names to tensors anywhere, or a TorchScript module's tensor attributes (docs/cli.md, "The
// state dict").
#include <unordered_set>

#include "model/model_builder.hpp"
#include "ckpt/error.hpp"
#include "base/text_util.hpp"

namespace ckpt {

using text::starts_with;

size_t ModelBuilder::dict_tensor_count(const Value* v) const {
    if (!v || v->kind != ValueKind::dict) return 0;
    size_t n = 0;
    for (size_t i = 0; i < v->dict_size(); ++i)
        n += v->dict_key(i)->kind == ValueKind::string && v->dict_value(i)->kind == ValueKind::tensor;
    return n;
}

void ModelBuilder::take_dict(const Value* d, const std::string& path) {
    StateDict& sd = c.state_dict;
    sd.kind = StateDictKind::dict;
    sd.path = path;
    sd.value = d;
    sd.entries.reserve(d->dict_size());
    std::string full;
    for (size_t i = 0; i < d->dict_size(); ++i) {
        const Value* k = d->dict_key(i);
        const Value* v = d->dict_value(i);
        if (k->kind != ValueKind::string || v->kind != ValueKind::tensor) {
            ++sd.other_values;
            continue;
        }
        if (!path.empty()) full.assign(path).append(".").append(k->s());
        size_t entry = entry_by_key.find(path.empty() ? k->s() : std::string_view(full), entry_key());
        if (entry != StringIndex::npos) {  // the name is the end of the entry's key
            std::string_view key = c.entries[entry].key;
            sd.entries.push_back({key.substr(key.size() - k->s().size()), entry});
        }
    }
    sd.has_metadata = d->state && d->state->kind == ValueKind::dict && d->state->get("_metadata");
}

bool ModelBuilder::is_module(const Value* v) const {
    if (!v || v->kind != ValueKind::object || !v->state || v->state->kind != ValueKind::dict) return false;
    return v->state->get("_parameters") && v->state->get("_modules");
}

void ModelBuilder::walk_module(const Value* m, const std::string& entry_path,
                                      const std::string& name_prefix, int depth) {
    if (depth > k_max_walk_depth) throw Error(ErrorKind::limit, "", "module tree nested too deeply");
    const Value* st = m->state;
    auto join = [](const std::string& a, const std::string& b) { return a.empty() ? b : a + "." + b; };
    std::unordered_set<std::string> non_persistent;
    if (const Value* np = st->get("_non_persistent_buffers_set"))
        for (const Value* x : np->items())
            if (x->kind == ValueKind::string) non_persistent.insert(std::string(x->s()));
    for (const char* group : {"_parameters", "_buffers"}) {
        const Value* d = st->get(group);
        if (!d || d->kind != ValueKind::dict) continue;
        for (size_t i = 0; i < d->dict_size(); ++i) {
            const Value* k = d->dict_key(i);
            if (k->kind != ValueKind::string || d->dict_value(i)->kind != ValueKind::tensor) continue;
            std::string name(k->s());
            if (std::string(group) == "_buffers" && non_persistent.count(name)) continue;
            size_t entry = entry_by_key.find(join(join(entry_path, group), name), entry_key());
            if (entry != StringIndex::npos) c.state_dict.entries.push_back({c.arena.own(name_prefix + name), entry});
        }
    }
    const Value* mods = st->get("_modules");
    if (!mods || mods->kind != ValueKind::dict) return;
    for (size_t i = 0; i < mods->dict_size(); ++i) {
        const Value* k = mods->dict_key(i);
        const Value* sub = mods->dict_value(i);
        if (k->kind != ValueKind::string || !is_module(sub)) continue;
        std::string name(k->s());
        walk_module(sub, join(join(entry_path, "_modules"), name), name_prefix + name + ".", depth + 1);
    }
}

void ModelBuilder::take_module(const Value* m, const std::string& path) {
    c.state_dict.kind = StateDictKind::module;
    c.state_dict.path = path;
    c.state_dict.value = m;
    walk_module(m, path, "", 0);
}

// Resolves a dotted path through dicts and object attributes; keys may contain dots themselves,
// so the longest matching key wins at each level.
const Value* ModelBuilder::resolve(const std::string& dotted, std::string& path_out) const {
    const Value* v = c.root;
    std::string rest = dotted;
    path_out.clear();
    while (!rest.empty()) {
        const Value* d = v;
        if (v->kind == ValueKind::object && v->state && v->state->kind == ValueKind::dict) d = v->state;
        if (d->kind != ValueKind::dict) return nullptr;
        const Value* next = nullptr;
        size_t used = 0;
        for (size_t i = 0; i < d->dict_size(); ++i) {
            std::string k = key_part(d->dict_key(i));
            if (k.size() > used && (rest == k || starts_with(rest, k + "."))) {
                next = d->dict_value(i);
                used = k.size();
            }
        }
        if (!next) return nullptr;
        path_out += (path_out.empty() ? "" : ".") + rest.substr(0, used);
        rest = used == rest.size() ? "" : rest.substr(used + 1);
        v = next;
    }
    return v;
}

void ModelBuilder::find_state_dict() {
    const Value* root = c.root;
    if (options.state_dict_key) {
        std::string path;
        const Value* v = resolve(*options.state_dict_key, path);
        if (!v) {
            // What there is to name: the top level's keys (an object's attributes), a few.
            const Value* d = root->kind == ValueKind::object && root->state ? root->state : root;
            std::string there;
            if (d->kind == ValueKind::dict)
                for (size_t i = 0; i < d->dict_size() && i < 8; ++i) there += (i ? ", " : "") + key_part(d->dict_key(i));
            if (d->kind == ValueKind::dict && d->dict_size() > 8) there += ", …";
            std::string why = dict_tensor_count(root) ? " (the top level is the state dict itself: leave --state-dict-key out)"
                              : there.empty()         ? " (the top level is no mapping)"
                                                      : " (the top level has: " + there + ")";
            throw Error(ErrorKind::usage, "", "--state-dict-key '" + *options.state_dict_key + "': no such key" + why);
        }
        if (is_module(v)) return take_module(v, path);
        if (dict_tensor_count(v) == 0)
            throw Error(ErrorKind::usage, "",
                        "--state-dict-key '" + *options.state_dict_key + "' is a " + type_name(v) +
                            ", not a mapping of names to tensors");
        return take_dict(v, path);
    }
    if (is_module(root)) return take_module(root, "");

    // Top level first, then the names training code uses, in this order; most tensors wins.
    static const char* k_names[] = {"state_dict", "model", "model_state_dict", "module", "net",
                                    "network", "ema", "model_ema", "ema_state_dict", "params",
                                    "weights", "generator"};
    const Value* best = nullptr;
    std::string best_path;
    size_t best_count = 0;
    auto consider = [&](const Value* v, const std::string& path) {
        size_t n = dict_tensor_count(v);
        if (n > best_count) {
            best = v;
            best_path = path;
            best_count = n;
        }
    };
    consider(root, "");
    if (root->kind == ValueKind::dict)
        for (const char* name : k_names) {
            const Value* v = root->get(name);
            if (v && is_module(v) && !best) return take_module(v, name);
            consider(v, name);
        }
    if (best) return take_dict(best, best_path);

    // Anywhere else: the largest mapping of names to tensors, breadth first.
    std::vector<std::pair<const Value*, std::string>> queue{{root, ""}};
    std::unordered_set<const Value*> seen{root};
    for (size_t q = 0; q < queue.size() && q < 1'000'000; ++q) {
        auto [v, path] = queue[q];
        consider(v, path);
        const Value* d = v->kind == ValueKind::object ? v->state : v;
        if (!d || d->kind != ValueKind::dict) continue;
        for (size_t i = 0; i < d->dict_size(); ++i) {
            const Value* x = d->dict_value(i);
            if ((x->kind == ValueKind::dict || x->kind == ValueKind::object) && seen.insert(x).second)
                queue.push_back({x, path.empty() ? key_part(d->dict_key(i)) : path + "." + key_part(d->dict_key(i))});
        }
    }
    if (best && c.format != Format::torchscript) return take_dict(best, best_path);

    // A TorchScript module keeps parameters as attributes: every tensor by its path.
    if (c.format == Format::torchscript) {
        c.state_dict.kind = StateDictKind::tree;
        c.state_dict.value = root;
        for (size_t i = 0; i < c.entries.size(); ++i)
            if (c.entries[i].tensor) c.state_dict.entries.push_back({c.entries[i].key, i});
    }
}

}  // namespace ckpt
