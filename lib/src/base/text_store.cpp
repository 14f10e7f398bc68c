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

std::string_view TextStore::keep(std::string_view text) { return keep(text, {}); }

std::string_view TextStore::keep(std::string_view a, std::string_view b) {
    size_t n = a.size() + b.size();
    if (n == 0) return {};
    char* at = room(n);
    if (!a.empty()) std::memcpy(at, a.data(), a.size());
    if (!b.empty()) std::memcpy(at + a.size(), b.data(), b.size());
    return {at, n};
}

void TextStore::clear() {
    m_blocks.clear();
    m_next = nullptr;
    m_left = 0;
}

}  // namespace ckpt
