// A fingerprint's prints found by key: the position of the first print of a key, through a
// StringIndex over the prints' own keys (no node and no copy of a key; 100,000 keys made maps of
// strings that were a tenth of a comparison's time). Private to the library.
#pragma once

#include <string_view>
#include <vector>

#include "base/string_index.hpp"
#include "ckpt/fingerprint.hpp"

namespace ckpt {

class PrintsByKey {
public:
    static constexpr size_t npos = StringIndex::npos;
    // `prints` must outlive this and not change.
    explicit PrintsByKey(const std::vector<TensorPrint>& prints) : m_prints(prints) {
        m_index.reserve(prints.size());
        for (size_t i = 0; i < prints.size(); ++i) m_index.insert(prints[i].key, i, KeyAt{&m_prints});
    }
    size_t find(std::string_view key) const { return m_index.find(key, KeyAt{&m_prints}); }

private:
    struct KeyAt {
        const std::vector<TensorPrint>* prints;
        std::string_view operator()(size_t i) const { return (*prints)[i].key; }
    };
    const std::vector<TensorPrint>& m_prints;
    StringIndex m_index;
};

}  // namespace ckpt
