#include "pickle/dict_keys.hpp"

namespace ckpt {

bool canonical_key(const Value* k, std::string& out) {
    switch (k->kind) {
        case ValueKind::string: out = "s"; out += k->s(); return true;
        case ValueKind::bytes: out = "b"; out += k->s(); return true;
        case ValueKind::none: out = "n"; return true;
        case ValueKind::boolean:
        case ValueKind::integer: out = "i" + std::to_string(k->i()); return true;
        case ValueKind::big_integer: out = "B"; out += k->s(); return true;
        case ValueKind::floating:
            // The range first: a cast of a double outside int64's range is undefined
            // (found by fuzz_pickle: a key of 1e300).
            if (k->f() > -9.2e18 && k->f() < 9.2e18 && k->f() == static_cast<double>(static_cast<int64_t>(k->f()))) {
                out = "i" + std::to_string(static_cast<int64_t>(k->f()));
                return true;
            }
            out = "f" + repr_float(k->f());
            return true;
        default: return false;
    }
}

// The text a key is indexed by at entries[pos]: its own (an index of strings) or its canonical text.
std::string_view DictKeys::indexed_text(const Index& index, ValueSpan entries, size_t pos) {
    if (index.strings) return entries[pos]->s();
    canonical_key(entries[pos], m_key_at);
    return m_key_at;
}

void DictKeys::index_all(Index& index, ValueSpan entries) {
    index.names = StringIndex();
    index.names.reserve(entries.size() / 2 + 1);
    auto text_at = [&](size_t p) { return indexed_text(index, entries, p); };
    std::string k;  // (the index compares through m_key_at)
    for (size_t pos = 0; pos < entries.size(); pos += 2) {
        if (index.strings) index.names.insert(entries[pos]->s(), pos, text_at);
        else if (canonical_key(entries[pos], k)) index.names.insert(k, pos, text_at);
    }
}

std::pair<size_t, bool> DictKeys::place(const Value* dict, const Value* key) {
    ValueSpan entries = dict->entries();
    if (entries.size() < 2 * k_scan) {
        if (!canonical_key(key, m_key)) return {entries.size(), true};
        for (size_t pos = 0; pos < entries.size(); pos += 2)
            if (canonical_key(entries[pos], m_key_at) && m_key_at == m_key) return {pos, false};
        return {entries.size(), true};
    }
    auto [it, made] = m_index.try_emplace(dict);
    Index& index = it->second;
    if (made) {  // the keys it holds so far (each one new: the search above kept them apart)
        for (size_t pos = 0; pos < entries.size() && index.strings; pos += 2)
            index.strings = entries[pos]->kind == ValueKind::string;
        index_all(index, entries);
    }
    if (index.strings && key->kind != ValueKind::string) {  // the first key that is not a string
        index.strings = false;
        index_all(index, entries);
    }
    auto text_at = [&](size_t p) { return indexed_text(index, entries, p); };
    if (index.strings) return index.names.insert(key->s(), entries.size(), text_at);
    if (!canonical_key(key, m_key)) return {entries.size(), true};
    return index.names.insert(m_key, entries.size(), text_at);
}

}  // namespace ckpt
