// Bounds-checked reading. Every read of file bytes in the core goes through ByteReader, so parsing code
// stays straight: a lying length or offset throws ckpt::Error(corrupt) before anything is allocated.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "ckpt/error.hpp"

namespace ckpt {

// A view of bytes: never owns. The owner (a mapping or a buffer) outlives every view of it.
struct ByteView {
    const uint8_t* data = nullptr;
    uint64_t size = 0;

    std::string_view as_chars() const {
        return {reinterpret_cast<const char*>(data), static_cast<size_t>(size)};
    }
    // The sub-range [offset, offset + length), or nullopt when it does not fit.
    std::optional<ByteView> sub(uint64_t offset, uint64_t length) const {
        if (offset > size || length > size - offset) return std::nullopt;
        return ByteView{data + offset, length};
    }
};

// a * b, or nullopt on overflow.
inline std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) {
    uint64_t r;
    if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
    return r;
}
inline std::optional<uint64_t> checked_add(uint64_t a, uint64_t b) {
    uint64_t r;
    if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
    return r;
}

// The `n` bytes at `p` as a little-endian unsigned number (the caller knows they are there): zip
// fields, pickle arguments. The reading side of append_le.
inline uint64_t load_le(const uint8_t* p, int n) {
    uint64_t v = 0;
    for (int i = n; i-- > 0;) v = (v << 8) | p[i];
    return v;
}

// A cursor over a ByteView. `base` is the absolute offset of the view in its file, so errors name
// the byte in the file, not in the record.
class ByteReader {
public:
    ByteReader(ByteView view, std::string context, uint64_t base = 0)
        : m_view(view), m_context(std::move(context)), m_base(base) {}

    uint64_t pos() const { return m_pos; }
    uint64_t remaining() const { return m_view.size - m_pos; }
    bool at_end() const { return m_pos == m_view.size; }
    uint64_t file_offset() const { return m_base + m_pos; }
    void seek(uint64_t pos) {
        if (pos > m_view.size) fail("seek past the end");
        m_pos = pos;
    }

    uint8_t u8() { return *take(1); }
    uint16_t u16le() { return static_cast<uint16_t>(le(2)); }
    uint32_t u32le() { return static_cast<uint32_t>(le(4)); }
    uint64_t u64le() { return le(8); }
    int32_t i32le() { return static_cast<int32_t>(u32le()); }
    double f64be() {
        const uint8_t* p = take(8);
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | p[i];
        double d;
        std::memcpy(&d, &bits, 8);
        return d;
    }
    // `length` bytes as a view; the length is checked against what is left before anything else.
    ByteView bytes(uint64_t length) {
        const uint8_t* p = take(length);
        return ByteView{p, length};
    }
    // Bytes up to (not including) the next '\n', which is consumed.
    std::string_view line() {
        const uint8_t* start = m_view.data + m_pos;
        const void* nl = std::memchr(start, '\n', static_cast<size_t>(remaining()));
        if (!nl) fail("line without a newline");
        uint64_t n = static_cast<const uint8_t*>(nl) - start;
        m_pos += n + 1;
        return {reinterpret_cast<const char*>(start), static_cast<size_t>(n)};
    }

    [[noreturn]] void fail(const std::string& what) const {
        throw Error(ErrorKind::corrupt, "", m_context + ": " + what, file_offset());
    }

private:
    // Inlined on every opcode: the message is built out of line, where it costs the hot path nothing.
    const uint8_t* take(uint64_t n) {
        if (n > remaining()) fail_truncated(n);
        const uint8_t* p = m_view.data + m_pos;
        m_pos += n;
        return p;
    }
    [[noreturn, gnu::cold, gnu::noinline]] void fail_truncated(uint64_t n) const {
        fail("truncated: needs " + std::to_string(n) + " bytes, " + std::to_string(remaining()) + " left");
    }
    uint64_t le(int n) { return load_le(take(n), n); }

    ByteView m_view;
    std::string m_context;
    uint64_t m_base;
    uint64_t m_pos = 0;
};

// The writing side: the low `n` bytes of `v`, little-endian, appended to `out` (zip headers, pickle
// arguments, the safetensors header length). One encoder for every writer.
inline void append_le(std::string& out, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}
inline std::string le_bytes(uint64_t v, int n) {
    std::string out;
    append_le(out, v, n);
    return out;
}

}  // namespace ckpt
