// Where a key goes in a dict the pickle VM builds, with Python's dict semantics: keys that compare
// equal are one key (1 == 1.0 == True, 'a' == 'a'), and a key set again keeps its first position.
// Private to the pickle VM.
#pragma once

#include <cstddef>
#include <string>
#include <unordered_map>
#include <utility>

#include "base/string_index.hpp"
#include "ckpt/value.hpp"

namespace ckpt {

// A text that is equal for keys Python's dict treats as equal, for the hashable scalars; false for
// keys compared by identity here (tuples, objects).
bool canonical_key(const Value* k, std::string& out);

class DictKeys {
public:
    // For `key` set on `dict`: the position in dict->entries() of the key equal to it and false, or
    // the position it takes (entries.size()) and true. A dict of up to k_scan keys is searched in
    // place; a larger one gets an index of its canonical keys, kept as long as this object. A
    // module's _metadata is 30,000 dicts of one key: an index each was 13 MiB.
    std::pair<size_t, bool> place(const Value* dict, const Value* key);

private:
    static constexpr size_t k_scan = 8;
    // A large dict's keys. While every key is a string (a state dict, _metadata), by the key's own
    // text, with no canonical text made per key; canonical texts from the first key that is not.
    struct Index {
        StringIndex names;
        bool strings = true;
    };
    void index_all(Index& index, ValueSpan entries);
    std::string_view indexed_text(const Index& index, ValueSpan entries, size_t pos);
    std::unordered_map<const Value*, Index> m_index;
    std::string m_key, m_key_at;  // scratch
};

}  // namespace ckpt
