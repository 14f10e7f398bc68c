// A set of names, each mapped to a position in the caller's own table (zip records, entries,
// storages). Open addressing over (hash, position) pairs: the index holds no copy of a name and
// allocates once per doubling, where std::unordered_map<std::string, size_t> allocates a node and
// a string per name and chases a pointer per probe. Names are read back from the caller's table
// only to confirm a hash match, so the table may grow and move between calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace ckpt {

uint64_t string_hash(std::string_view s);  // XXH3-64

class StringIndex {
public:
    static constexpr size_t npos = ~size_t{0};

    size_t size() const { return m_size; }
    void reserve(size_t n) {
        if (n * 4 > m_slots.size() * 3) grow(n);
    }
    // The position stored for `name`, or npos. `name_of(pos)` gives the name at a position.
    template <class NameOf>
    size_t find(std::string_view name, NameOf&& name_of) const {
        if (m_slots.empty()) return npos;
        uint32_t h = static_cast<uint32_t>(string_hash(name));
        for (size_t i = h & m_mask;; i = (i + 1) & m_mask) {
            const Slot& s = m_slots[i];
            if (s.pos_plus_1 == 0) return npos;
            if (s.hash == h && name_of(s.pos_plus_1 - 1) == name) return s.pos_plus_1 - 1;
        }
    }
    // Adds name → pos unless the name is there already. Returns the position stored for the name
    // and whether it was added. Positions stop below 2^32 - 1 (Error(limit) past that).
    template <class NameOf>
    std::pair<size_t, bool> insert(std::string_view name, size_t pos, NameOf&& name_of) {
        if (pos >= k_max_pos) too_many();
        reserve(m_size + 1);
        uint32_t h = static_cast<uint32_t>(string_hash(name));
        for (size_t i = h & m_mask;; i = (i + 1) & m_mask) {
            Slot& s = m_slots[i];
            if (s.pos_plus_1 == 0) {
                s = {h, static_cast<uint32_t>(pos + 1)};
                ++m_size;
                return {pos, true};
            }
            if (s.hash == h && name_of(s.pos_plus_1 - 1) == name) return {s.pos_plus_1 - 1, false};
        }
    }

private:
    // 8 bytes: the hash's low half (which picks the slot, as the table stays below 2^32 slots) and
    // the position. Every page of the table is touched, and on the bench VM a fresh page costs more
    // than all the probes into it (docs/performance.md).
    struct Slot {
        uint32_t hash = 0;
        uint32_t pos_plus_1 = 0;  // 0: empty
    };
    static constexpr size_t k_max_pos = UINT32_MAX - 1;
    void grow(size_t n);
    [[noreturn]] static void too_many();

    std::vector<Slot> m_slots;
    size_t m_mask = 0;
    size_t m_size = 0;
};

}  // namespace ckpt
