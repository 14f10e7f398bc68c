#include "base/string_index.hpp"

#include <string>

#include <xxhash.h>

#include "ckpt/error.hpp"
#include "base/huge_pages.hpp"

namespace ckpt {

uint64_t string_hash(std::string_view s) { return XXH3_64bits(s.data(), s.size()); }

void StringIndex::too_many() {
    throw Error(ErrorKind::limit, "", "more than " + std::to_string(k_max_pos) + " names in one table");
}

void StringIndex::grow(size_t n) {
    size_t cap = 16;
    while (cap * 3 < n * 4) cap *= 2;  // load ≤ 3/4
    std::vector<Slot> old = std::move(m_slots);
    m_slots.reserve(cap);
    advise_huge_pages(m_slots);
    m_slots.assign(cap, Slot{});
    m_mask = cap - 1;
    for (const Slot& s : old) {
        if (s.pos_plus_1 == 0) continue;
        size_t i = s.hash & m_mask;
        while (m_slots[i].pos_plus_1 != 0) i = (i + 1) & m_mask;
        m_slots[i] = s;
    }
}

}  // namespace ckpt
