// The parts of the model every format shares, derived once a reader has filled a Contents: the value
// tree flattened into keyed entries, the storages checked against their records, nested tensors'
// components resolved, the state dict found (private to the library).
#pragma once

#include <string>
#include <unordered_map>
#include <unordered_set>

#include "model/contents.hpp"

namespace ckpt {

class ModelBuilder {
public:
    ModelBuilder(Checkpoint::Contents& contents, const OpenOptions& options) : c(contents), options(options) {}
    // Entries, state dict, and with `own_storages` the storage checks and nested components too (a
    // view joined from parts whose readers checked theirs passes false).
    void build(bool own_storages);

private:
    static constexpr int k_max_walk_depth = 2000;  // the value tree and module walks
    Checkpoint::Contents& c;
    const OpenOptions& options;
    StringIndex entry_by_key;  // the first entry of each key
    std::unordered_map<const Value*, bool> m_has_tensor;
    // Values the flattening walk has visited, and how many it may (build sets it): a pickle whose memo
    // shares values can make a few hundred values reachable by 10^10 paths, each a key.
    uint64_t m_visits = 0, m_max_visits = 0;
    auto entry_key() const {
        return [this](size_t pos) -> std::string_view { return c.entries[pos].key; };
    }

    void check_storages();       // storage_checks.cpp
    void resolve_components();   // storage_checks.cpp
    void flatten(const Value* v, std::string& key, int depth, std::unordered_set<const Value*>& path);
    void add_leaf(const std::string& key, const Value* v);
    // The last str key of the root dict: the pickle's (or the arena's) text, which lives as long as
    // the entries; an entry at that key views it instead of a copy of its own.
    std::string_view m_root_key;
    bool contains_tensor(const Value* v, int depth, std::unordered_set<const Value*>& path);
    void find_state_dict();      // state_dict.cpp, as the four below
    size_t dict_tensor_count(const Value* v) const;
    void take_dict(const Value* d, const std::string& path);
    bool is_module(const Value* v) const;
    void take_module(const Value* m, const std::string& path);
    void walk_module(const Value* m, const std::string& entry_path, const std::string& name_prefix, int depth);
    const Value* resolve(const std::string& dotted, std::string& path_out) const;
};

}  // namespace ckpt
