// Text kept for as long as its owner lives, in blocks that never move: a name costs its bytes and
// no allocation of its own, and a std::string_view of it stays valid until clear(). The value
// arena keeps its strings (and so a checkpoint's entry keys) here; a checkpoint keeps in one of
// its own (Contents::names, which outlives the arena: keep_records_only) the record names that are
// not in its file and the text of the tables it joined from parts.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>
#include <vector>

namespace ckpt {

class TextStore {
public:
    TextStore() = default;
    TextStore(TextStore&&) = default;
    TextStore& operator=(TextStore&&) = default;

    // A copy of `text` (empty text is kept as an empty view).
    std::string_view keep(std::string_view text);
    // Frees every text kept so far: no view of one may be used after.
    void clear();

private:
    char* room(size_t n);

    std::vector<std::unique_ptr<char[]>> m_blocks;
    char* m_next = nullptr;
    size_t m_left = 0;
};

}  // namespace ckpt
