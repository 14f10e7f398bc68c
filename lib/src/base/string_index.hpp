// A set of names, each mapped to a position in the caller's own table (zip records, entries,
// storages). Open addressing over (hash, position) pairs: the index holds no copy of a name and
// allocates once per doubling, where std::unordered_map<std::string, size_t> allocates a node and
// a string per name and chases a pointer per probe. Names are read back from the caller's table
// only to confirm a hash match, so the table may grow and move between calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
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

// Names that are small decimal numbers ("0", "1", … as torch.save names its storages and their
// records), each mapped to a position by its number: a table read by index, with no hash and no
// name read back (a name's pages may have left the process). A caller keeps the other names in a
// StringIndex: number() and covers() decide which table a name belongs to, the same way each time.
class DecimalIndex {
public:
    static constexpr size_t npos = StringIndex::npos;

    // Numbers [0, bound) are held here.
    explicit DecimalIndex(size_t bound = 0) : m_pos_plus_1(bound, 0) {}
    // The number `s` writes, when it writes one the canonical way (digits only, no leading zero
    // but in "0"), below 10^9.
    static std::optional<uint32_t> number(std::string_view s) {
        if (s.empty() || s.size() > 9 || (s[0] == '0' && s.size() > 1)) return std::nullopt;
        uint32_t n = 0;
        for (char c : s) {
            if (c < '0' || c > '9') return std::nullopt;
            n = n * 10 + static_cast<uint32_t>(c - '0');
        }
        return n;
    }
    bool covers(uint32_t n) const { return n < m_pos_plus_1.size(); }
    size_t find(uint32_t n) const { return covers(n) && m_pos_plus_1[n] ? m_pos_plus_1[n] - 1 : npos; }
    // Adds n → pos unless n is there already (the first stays, as in StringIndex); n is covered and
    // pos below 2^32 - 1.
    std::pair<size_t, bool> insert(uint32_t n, size_t pos) {
        uint32_t& slot = m_pos_plus_1[n];
        if (slot) return {slot - 1, false};
        slot = static_cast<uint32_t>(pos + 1);
        return {pos, true};
    }

private:
    std::vector<uint32_t> m_pos_plus_1;  // 0: none
};

}  // namespace ckpt
