// A tensor's sizes or strides: up to two in place, more on the heap. 24 bytes, as a std::vector,
// without its allocation for nearly every tensor of a model (one or two dimensions): a checkpoint of
// 100,000 tensors made 200,000 allocations of 16 bytes, 6.4 MiB with malloc's own.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <type_traits>
#include <vector>

namespace ckpt {

class Dims {
public:
    using value_type = int64_t;
    using size_type = size_t;
    using difference_type = std::ptrdiff_t;
    using reference = int64_t&;
    using const_reference = const int64_t&;
    using pointer = int64_t*;
    using const_pointer = const int64_t*;
    using iterator = int64_t*;
    using const_iterator = const int64_t*;

    Dims() : m_in{0, 0} {}
    Dims(std::initializer_list<int64_t> v) : Dims() { assign(v.begin(), v.end()); }
    Dims(const std::vector<int64_t>& v) : Dims() { assign(v.begin(), v.end()); }  // NOLINT: a vector's dims
    Dims(size_t n, int64_t x) : Dims() { assign(n, x); }
    Dims(const Dims& o) : Dims() { assign(o.begin(), o.end()); }
    Dims(Dims&& o) noexcept : Dims() { take(o); }
    Dims& operator=(const Dims& o) {
        if (this != &o) assign(o.begin(), o.end());
        return *this;
    }
    Dims& operator=(Dims&& o) noexcept {
        if (this != &o) {
            release();
            take(o);
        }
        return *this;
    }
    Dims& operator=(const std::vector<int64_t>& v) {
        assign(v.begin(), v.end());
        return *this;
    }
    ~Dims() { release(); }
    operator std::vector<int64_t>() const { return {begin(), end()}; }  // NOLINT: where a vector is taken

    size_t size() const { return m_size; }
    bool empty() const { return m_size == 0; }
    int64_t* data() { return on_heap() ? m_heap : m_in; }
    const int64_t* data() const { return on_heap() ? m_heap : m_in; }
    int64_t* begin() { return data(); }
    int64_t* end() { return data() + m_size; }
    const int64_t* begin() const { return data(); }
    const int64_t* end() const { return data() + m_size; }
    int64_t& operator[](size_t n) { return data()[n]; }
    int64_t operator[](size_t n) const { return data()[n]; }
    int64_t& front() { return data()[0]; }
    int64_t front() const { return data()[0]; }
    int64_t& back() { return data()[m_size - 1]; }
    int64_t back() const { return data()[m_size - 1]; }

    void clear() { m_size = 0; }
    void reserve(size_t n) {
        if (n > m_cap) move_to(n);
    }
    void push_back(int64_t x) {
        if (m_size == m_cap) move_to(std::max<size_t>(m_cap * 2, 4));
        data()[m_size++] = x;
    }
    void resize(size_t n, int64_t x = 0) {
        reserve(n);
        if (n > m_size) std::fill(data() + m_size, data() + n, x);
        m_size = static_cast<uint32_t>(n);
    }
    void assign(size_t n, int64_t x) {
        clear();
        resize(n, x);
    }
    template <class It, class = std::enable_if_t<!std::is_integral_v<It>>>  // iterators, not (count, value)
    void assign(It first, It last) {
        size_t n = static_cast<size_t>(std::distance(first, last));
        clear();
        reserve(n);
        std::copy(first, last, data());
        m_size = static_cast<uint32_t>(n);
    }

    friend bool operator==(const Dims& a, const Dims& b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }
    friend bool operator!=(const Dims& a, const Dims& b) { return !(a == b); }
    friend bool operator==(const Dims& a, const std::vector<int64_t>& b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }
    friend bool operator!=(const Dims& a, const std::vector<int64_t>& b) { return !(a == b); }
    friend bool operator==(const std::vector<int64_t>& a, const Dims& b) { return b == a; }
    friend bool operator!=(const std::vector<int64_t>& a, const Dims& b) { return !(b == a); }

private:
    static constexpr uint32_t k_in_place = 2;
    bool on_heap() const { return m_cap > k_in_place; }
    void move_to(size_t cap) {
        auto* heap = new int64_t[cap];
        std::copy(begin(), end(), heap);
        release();
        m_heap = heap;
        m_cap = static_cast<uint32_t>(cap);
    }
    void release() {
        if (on_heap()) delete[] m_heap;
        m_cap = k_in_place;
    }
    void take(Dims& o) {  // this holds nothing on the heap
        m_size = o.m_size;
        m_cap = o.m_cap;
        if (o.on_heap()) m_heap = o.m_heap;
        else std::copy(o.m_in, o.m_in + o.m_size, m_in);
        o.m_cap = k_in_place;
        o.m_size = 0;
    }

    union {
        int64_t m_in[k_in_place];
        int64_t* m_heap;
    };
    uint32_t m_size = 0;
    uint32_t m_cap = k_in_place;
};

}  // namespace ckpt
