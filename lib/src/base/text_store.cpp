#include "ckpt/text_store.hpp"

#include <cstring>

namespace ckpt {

namespace {
constexpr size_t k_chunk = 64 * 1024;
}

char* TextStore::room(size_t n) {
    if (n > m_left) {
        if (n > k_chunk / 4) {  // a long text gets a block of its own
            m_blocks.push_back(std::unique_ptr<char[]>(new char[n]));
            return m_blocks.back().get();
        }
        m_blocks.push_back(std::unique_ptr<char[]>(new char[k_chunk]));
        m_next = m_blocks.back().get();
        m_left = k_chunk;
    }
    char* at = m_next;
    m_next += n;
    m_left -= n;
    return at;
}

std::string_view TextStore::keep(std::string_view text) {
    if (text.empty()) return {};
    char* at = room(text.size());
    std::memcpy(at, text.data(), text.size());
    return {at, text.size()};
}

void TextStore::clear() {
    m_blocks.clear();
    m_next = nullptr;
    m_left = 0;
}

}  // namespace ckpt
