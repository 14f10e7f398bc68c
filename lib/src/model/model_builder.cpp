// The value tree flattened into entries, a leaf per dotted key (the walk every format's model shares),
// and the order of ModelBuilder's steps.
#include "model/model_builder.hpp"

#include "ckpt/error.hpp"
#include "base/huge_pages.hpp"

namespace ckpt {

void ModelBuilder::build(bool own_storages) {
    if (own_storages)
        for (const TensorInfo& t : c.tensors)
            if (t.nested()) {
                resolve_components();
                break;
            }
    std::string key;
    std::unordered_set<const Value*> on_path;
    c.entries.reserve(c.tensors.size());  // a hint: most leaves of a checkpoint are tensors
    advise_huge_pages(c.entries);
    entry_by_key.reserve(c.tensors.size());
    // Every value made is one key or a few (a tensor's attributes); sharing — tied weights, a dict
    // kept twice — adds some. Far more paths than values is a pickle built to expand.
    m_max_visits = 2'000'000 + 8 * c.arena.count();
    flatten(c.root, key, 0, on_path);
    if (own_storages) check_storages();
    find_state_dict();
}

void ModelBuilder::add_leaf(const std::string& key, const Value* v) {
    Entry e;
    // With the values the entries point at: keep_records_only frees both.
    e.key = key == m_root_key ? m_root_key : c.arena.own(key);
    e.value = v;
    if (v->kind == ValueKind::tensor) e.tensor = static_cast<size_t>(v->i());
    entry_by_key.insert(key, c.entries.size(), entry_key());
    c.entries.push_back(std::move(e));
}

bool ModelBuilder::contains_tensor(const Value* v, int depth, std::unordered_set<const Value*>& path) {
    if (v->kind == ValueKind::tensor) return true;
    auto it = m_has_tensor.find(v);
    if (it != m_has_tensor.end()) return it->second;
    if (depth > k_max_walk_depth)
        throw Error(ErrorKind::limit, "", "value tree nested deeper than " + std::to_string(k_max_walk_depth) + " levels");
    if (!path.insert(v).second) return false;  // a cycle: nothing new below
    bool found = false;
    auto scan = [&](ValueSpan vs) {
        for (const Value* x : vs)
            if (!found && contains_tensor(x, depth + 1, path)) found = true;
    };
    scan(v->items());
    scan(v->entries());
    if (!found && v->state) found = contains_tensor(v->state, depth + 1, path);
    if (!found && v->kind == ValueKind::object && v->args()) found = contains_tensor(v->args(), depth + 1, path);
    path.erase(v);
    m_has_tensor[v] = found;
    return found;
}

void ModelBuilder::flatten(const Value* v, std::string& key, int depth,
                                  std::unordered_set<const Value*>& path) {
    if (depth > k_max_walk_depth)
        throw Error(ErrorKind::limit, "", "value tree nested deeper than " + std::to_string(k_max_walk_depth) + " levels");
    if (++m_visits > m_max_visits)
        throw Error(ErrorKind::limit, "",
                    "its " + std::to_string(c.arena.count()) + " values are shared so that they are reachable by more than " +
                        std::to_string(m_max_visits) + " paths (a pickle built to expand through its memo): not flattened into keys");
    auto child = [&](std::string_view part, const Value* x) {
        size_t old = key.size();
        if (!key.empty()) key += '.';
        key += part;
        flatten(x, key, depth + 1, path);
        key.resize(old);
    };
    // A dict key's path part; str keys, nearly all of them, without a string of their own.
    auto dict_child = [&](const Value* k, const Value* x) {
        if (k->kind != ValueKind::string) return child(key_part(k), x);
        if (key.empty()) m_root_key = k->s();
        child(k->s(), x);
    };
    bool is_dict = v->kind == ValueKind::dict;
    bool is_seq = v->kind == ValueKind::list || v->kind == ValueKind::tuple;
    bool is_obj = v->kind == ValueKind::object;
    std::unordered_set<const Value*> scratch;
    bool recurse = (is_dict && v->dict_size() > 0) ||
                   ((is_seq || is_obj) && contains_tensor(v, 0, scratch));
    if (!recurse || path.count(v)) {
        add_leaf(key, v);
        if (v->kind == ValueKind::tensor && v->state && !path.count(v)) {
            // A tensor's Python attributes (t.tag = "ema"): leaves under its key, as torch's
            // __dict__ shows them; state is a dict, or (dict or None, slots dict).
            path.insert(v);
            const Value* st = v->state;
            bool pair = st->kind == ValueKind::tuple;
            for (const Value* d : {st, pair ? static_cast<const Value*>(st->items()[0]) : nullptr,
                                   pair ? static_cast<const Value*>(st->items()[1]) : nullptr})
                if (d && d->kind == ValueKind::dict)
                    for (size_t n = 0; n < d->dict_size(); ++n) dict_child(d->dict_key(n), d->dict_value(n));
            path.erase(v);
        }
        return;
    }
    path.insert(v);
    if (is_dict || is_obj) {
        for (size_t n = 0; n < v->dict_size(); ++n) dict_child(v->dict_key(n), v->dict_value(n));
    }
    if (is_seq || is_obj) {
        for (size_t n = 0; n < v->items().size(); ++n) child(std::to_string(n), v->items()[n]);
    }
    if (is_obj) {
        const Value* st = v->state;
        if (st && st->kind == ValueKind::tuple && st->items().size() == 2 && st->items()[0]->kind == ValueKind::dict)
            st = st->items()[0];
        if (st && st->kind == ValueKind::dict) {
            for (size_t n = 0; n < st->dict_size(); ++n) dict_child(st->dict_key(n), st->dict_value(n));
        } else if (st && st->kind != ValueKind::none) {
            child("__state__", st);
        }
        if (v->args() && !v->args()->items().empty()) {
            std::unordered_set<const Value*> s2;
            if (contains_tensor(v->args(), 0, s2)) child("__args__", v->args());
        }
    }
    path.erase(v);
}

}  // namespace ckpt
