// Private to the library: what the format readers of checkpoint.cpp and sharded.cpp share while they
// fill a Checkpoint (flattening the value tree, checking storages, finding the state dict).
#pragma once

#include <string>
#include <unordered_map>
#include <unordered_set>

#include "ckpt/checkpoint.hpp"
#include "ckpt/string_index.hpp"

namespace ckpt {

// The legacy format's first bytes: a pickle of its magic number (legacy.cpp).
bool sniff_legacy(ByteView file);
class ZipArchive;
// A torch.export archive: a zip with its records at the top level (export.cpp).
bool sniff_export(const ZipArchive& zip);

struct Checkpoint::Builder {
    static constexpr int k_max_walk_depth = 2000;  // the value tree and module walks
    Checkpoint& c;
    const OpenOptions& options;
    StringIndex entry_by_key;  // the first entry of each key
    auto entry_key() const {
        return [this](size_t pos) -> std::string_view { return c.m_entries[pos].key; };
    }

    void read_torch_zip();
    void read_safetensors_file();
    void read_legacy();  // legacy.cpp
    void read_export();  // export.cpp
    void check_storages();       // checkpoint_parts.cpp
    void resolve_components();   // checkpoint_parts.cpp
    void flatten(const Value* v, std::string& key, int depth, std::unordered_set<const Value*>& path);
    void add_leaf(const std::string& key, const Value* v);
    bool contains_tensor(const Value* v, int depth, std::unordered_set<const Value*>& path);
    void find_state_dict();      // state_dict.cpp, as the four below
    size_t dict_tensor_count(const Value* v) const;
    void take_dict(const Value* d, const std::string& path);
    bool is_module(const Value* v) const;
    void take_module(const Value* m, const std::string& path);
    void walk_module(const Value* m, const std::string& entry_path, const std::string& name_prefix,
                     int depth);
    const Value* resolve(const std::string& dotted, std::string& path_out) const;

    std::unordered_map<const Value*, bool> m_has_tensor;
};

}  // namespace ckpt
