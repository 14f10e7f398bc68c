#include "io/decompress.hpp"

#include <bzlib.h>
#include <lz4frame.h>
#include <lzma.h>
#include <zlib.h>
#include <zstd.h>
#include <zstd_errors.h>

#include <algorithm>
#include <cstring>

namespace ckpt {

namespace {

bool starts(ByteView b, std::initializer_list<uint8_t> magic) {
    if (b.size < magic.size()) return false;
    size_t i = 0;
    for (uint8_t m : magic)
        if (b.data[i++] != m) return false;
    return true;
}

// joblib's old compressed files: "ZF", the uncompressed length as hex in 19 characters padded with
// spaces (numpy_pickle_compat.py, _MAX_LEN), sometimes one more space, then a zlib stream. joblib
// reads the length with int(field, 16), so the field is what that takes: blanks around, a sign, a
// 0x prefix, digits with single underscores between them.
constexpr uint64_t k_zfile_header = 2 + 19;

bool python_hex_int(std::string_view t) {
    auto blank = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
    while (!t.empty() && blank(t.front())) t.remove_prefix(1);
    while (!t.empty() && blank(t.back())) t.remove_suffix(1);
    if (!t.empty() && (t[0] == '+' || t[0] == '-')) t.remove_prefix(1);
    if (t.size() >= 2 && t[0] == '0' && (t[1] == 'x' || t[1] == 'X')) {
        t.remove_prefix(2);
        if (!t.empty() && t[0] == '_') t.remove_prefix(1);
    }
    if (t.empty()) return false;
    bool digit = false;
    for (char c : t) {
        bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
        if (c == '_' && digit) {
            digit = false;
            continue;
        }
        if (!hex) return false;
        digit = true;
    }
    return digit;
}

bool zfile_header(ByteView b) {
    if (b.size < k_zfile_header + 2 || b.data[0] != 'Z' || b.data[1] != 'F') return false;
    return python_hex_int({reinterpret_cast<const char*>(b.data + 2), k_zfile_header - 2});
}

// The output: grown as the decoder asks, never past the cap.
class Sink {
public:
    explicit Sink(uint64_t cap) : m_cap(cap) {}
    // Room for the decoder's next call: where to write and how much (0 when the cap is reached).
    uint8_t* room(uint64_t& n) {
        if (m_out.size() - m_used < (64u << 10)) {
            uint64_t grow = std::max<uint64_t>(m_out.size(), 256u << 10);
            m_out.resize(std::min<uint64_t>(m_out.size() + grow, m_cap));
        }
        n = m_out.size() - m_used;
        return m_out.data() + m_used;
    }
    void wrote(uint64_t n) { m_used += n; }
    bool full() const { return m_used >= m_cap; }
    // `limited`: stopped at a limit of scan's, not at broken data (the rest is not seen).
    Decompressed finish(bool complete, std::string problem, bool limited = false) {
        Decompressed d;
        m_out.resize(m_used);
        d.bytes = std::move(m_out);
        d.capped = (full() || limited) && !complete;
        d.complete = complete;
        d.problem = complete ? "" : limited ? std::move(problem) : d.capped ? "more than " + std::to_string(m_cap) + " bytes once decompressed" : std::move(problem);
        return d;
    }

private:
    std::vector<uint8_t> m_out;
    uint64_t m_used = 0, m_cap;
};

// zlib (windowBits 15) and gzip (31). gzip members follow each other, as Python's gzip module reads
// them, with NUL padding skipped between them; bytes after the last one that are no member end it.
Decompressed inflate_all(ByteView in, int window_bits, bool members, uint64_t cap) {
    std::vector<uint8_t> out;
    uint64_t at = 0;
    std::string problem;
    bool complete = false, capped = false;
    while (true) {
        Inflated r = inflate_into({in.data + at, in.size - at}, window_bits, cap - out.size(), out);
        at += r.consumed;
        if (r.rc != Z_STREAM_END) {
            capped = out.size() >= cap;
            problem = capped ? "more than " + std::to_string(cap) + " bytes once decompressed"
                      : r.rc == Z_BUF_ERROR ? "the compressed data ends early" : "the compressed data is broken";
            break;
        }
        complete = true;
        if (!members) break;
        while (at < in.size && in.data[at] == 0) ++at;
        if (at >= in.size || !starts({in.data + at, in.size - at}, {0x1f, 0x8b})) break;
        complete = false;
    }
    Decompressed d;
    d.bytes = std::move(out);
    d.complete = complete;
    d.capped = capped;
    d.problem = complete ? "" : problem;
    return d;
}

Decompressed bunzip(ByteView in, uint64_t cap) {
    Sink out(cap);
    uint64_t at = 0;
    bool complete = false;
    std::string problem;
    while (at < in.size && starts({in.data + at, in.size - at}, {'B', 'Z', 'h'})) {
        bz_stream bz{};
        if (BZ2_bzDecompressInit(&bz, 0, 0) != BZ_OK) return out.finish(false, "cannot start bzip2");
        int rc = BZ_OK;
        while (rc == BZ_OK && !out.full()) {
            uint64_t n;
            uint8_t* dst = out.room(n);
            bz.next_in = reinterpret_cast<char*>(const_cast<uint8_t*>(in.data + at));
            bz.avail_in = static_cast<unsigned>(std::min<uint64_t>(in.size - at, 1u << 30));
            bz.next_out = reinterpret_cast<char*>(dst);
            bz.avail_out = static_cast<unsigned>(std::min<uint64_t>(n, 1u << 30));
            unsigned before_in = bz.avail_in, before_out = bz.avail_out;
            rc = BZ2_bzDecompress(&bz);
            at += before_in - bz.avail_in;
            out.wrote(before_out - bz.avail_out);
            if (rc == BZ_OK && before_in == bz.avail_in && before_out == bz.avail_out) rc = BZ_UNEXPECTED_EOF;
        }
        BZ2_bzDecompressEnd(&bz);
        complete = rc == BZ_STREAM_END;
        if (!complete) {
            problem = rc == BZ_UNEXPECTED_EOF ? "the compressed data ends early" : "the compressed data is broken";
            break;
        }
    }
    return out.finish(complete, problem);
}

// What the lzma decoders may take for their dictionaries: a header can ask for gigabytes (the
// fuzzer's 2 GiB lzma-alone), which a Python loader would allocate; scan says what it did not see.
constexpr uint64_t k_lzma_memory = 256u << 20;

Decompressed unxz(ByteView in, bool alone, uint64_t cap) {
    Sink out(cap);
    lzma_stream xz = LZMA_STREAM_INIT;
    lzma_ret rc = alone ? lzma_alone_decoder(&xz, k_lzma_memory) : lzma_stream_decoder(&xz, k_lzma_memory, LZMA_CONCATENATED);
    if (rc != LZMA_OK) return out.finish(false, "cannot start lzma");
    xz.next_in = in.data;
    xz.avail_in = in.size;
    lzma_action action = LZMA_RUN;
    while (rc == LZMA_OK && !out.full()) {
        uint64_t n;
        xz.next_out = out.room(n);
        xz.avail_out = n;
        if (xz.avail_in == 0) action = LZMA_FINISH;
        rc = lzma_code(&xz, action);
        out.wrote(n - xz.avail_out);
    }
    lzma_end(&xz);
    if (rc == LZMA_MEMLIMIT_ERROR)
        return out.finish(false, "its dictionary needs more than " + std::to_string(k_lzma_memory >> 20) + " MiB, which scan does not give", true);
    return out.finish(rc == LZMA_STREAM_END, rc == LZMA_BUF_ERROR ? "the compressed data ends early" : "the compressed data is broken");
}

Decompressed unlz4(ByteView in, uint64_t cap) {
    Sink out(cap);
    LZ4F_dctx* ctx = nullptr;
    if (LZ4F_isError(LZ4F_createDecompressionContext(&ctx, LZ4F_VERSION))) return out.finish(false, "cannot start lz4");
    uint64_t at = 0;
    size_t hint = 1;
    std::string problem;
    while (at < in.size && !out.full()) {
        uint64_t n;
        uint8_t* dst = out.room(n);
        size_t dst_size = n, src_size = in.size - at;
        hint = LZ4F_decompress(ctx, dst, &dst_size, in.data + at, &src_size, nullptr);
        if (LZ4F_isError(hint)) {
            problem = std::string("the compressed data is broken (") + LZ4F_getErrorName(hint) + ")";
            break;
        }
        at += src_size;
        out.wrote(dst_size);
        if (hint == 0 && (at >= in.size || !starts({in.data + at, in.size - at}, {0x04, 0x22, 0x4d, 0x18}))) break;
        if (src_size == 0 && dst_size == 0) break;
    }
    LZ4F_freeDecompressionContext(ctx);
    if (problem.empty() && hint != 0) problem = "the compressed data ends early";
    return out.finish(problem.empty() && hint == 0, problem);
}

Decompressed unzstd(ByteView in, uint64_t cap) {
    Sink out(cap);
    ZSTD_DStream* ds = ZSTD_createDStream();
    if (!ds) return out.finish(false, "cannot start zstd");
    ZSTD_initDStream(ds);
    ZSTD_inBuffer src{in.data, in.size, 0};
    size_t rc = 1;
    std::string problem;
    while (src.pos < src.size && !out.full()) {
        uint64_t n;
        ZSTD_outBuffer dst{out.room(n), n, 0};
        rc = ZSTD_decompressStream(ds, &dst, &src);
        out.wrote(dst.pos);
        if (ZSTD_isError(rc)) {
            if (ZSTD_getErrorCode(rc) == ZSTD_error_frameParameter_windowTooLarge) {
                ZSTD_freeDStream(ds);
                return out.finish(false, "its window needs more memory than scan gives", true);
            }
            problem = std::string("the compressed data is broken (") + ZSTD_getErrorName(rc) + ")";
            break;
        }
        if (dst.pos == 0 && rc != 0 && src.pos == src.size) break;
    }
    ZSTD_freeDStream(ds);
    if (problem.empty() && rc != 0) problem = "the compressed data ends early";
    return out.finish(problem.empty() && rc == 0, problem);
}

}  // namespace

Inflated inflate_into(ByteView in, int window_bits, uint64_t max_out, std::vector<uint8_t>& out) {
    Inflated r;
    z_stream zs{};
    if (inflateInit2(&zs, window_bits) != Z_OK) {
        r.rc = Z_STREAM_ERROR;
        return r;
    }
    const uint64_t start = out.size();
    int rc = Z_OK;
    while (rc == Z_OK && out.size() - start < max_out) {
        uint64_t have = out.size() - start;
        uint64_t room = out.capacity() > out.size() ? out.capacity() - out.size() : std::max<uint64_t>(have, 64u << 10);
        room = std::min<uint64_t>({room, max_out - have, 1u << 30});
        size_t at = out.size();
        out.resize(at + room);
        zs.next_in = const_cast<Bytef*>(in.data + r.consumed);
        zs.avail_in = static_cast<uInt>(std::min<uint64_t>(in.size - r.consumed, 1u << 30));
        zs.next_out = out.data() + at;
        zs.avail_out = static_cast<uInt>(room);
        uInt before_in = zs.avail_in;
        rc = inflate(&zs, Z_NO_FLUSH);
        r.consumed += before_in - zs.avail_in;
        uint64_t made = room - zs.avail_out;
        out.resize(at + made);
        if (rc == Z_OK && before_in == zs.avail_in && made == 0) rc = Z_BUF_ERROR;
    }
    inflateEnd(&zs);
    r.rc = rc;
    return r;
}

Wrapper sniff_wrapper(ByteView b) {
    if (starts(b, {0x1f, 0x8b, 0x08})) return Wrapper::gzip;
    if (b.size >= 2 && b.data[0] == 0x78 && ((0x78u << 8) | b.data[1]) % 31 == 0) return Wrapper::zlib;
    if (b.size >= 4 && starts(b, {'B', 'Z', 'h'}) && b.data[3] >= '1' && b.data[3] <= '9') return Wrapper::bz2;
    if (starts(b, {0xfd, '7', 'z', 'X', 'Z', 0x00})) return Wrapper::xz;
    if (starts(b, {0x5d, 0x00})) return Wrapper::lzma;  // joblib's prefix: any dictionary size after it
    if (starts(b, {0x04, 0x22, 0x4d, 0x18})) return Wrapper::lz4;
    if (starts(b, {0x28, 0xb5, 0x2f, 0xfd})) return Wrapper::zstd;
    if (zfile_header(b)) return Wrapper::joblib_zfile;
    if (starts(b, {'7', 'z', 0xbc, 0xaf, 0x27, 0x1c})) return Wrapper::sevenzip;
    if (starts(b, {'R', 'a', 'r', '!', 0x1a, 0x07})) return Wrapper::rar;
    return Wrapper::none;
}

const char* wrapper_name(Wrapper w) {
    switch (w) {
        case Wrapper::none: return "none";
        case Wrapper::gzip: return "gzip";
        case Wrapper::zlib: return "zlib";
        case Wrapper::bz2: return "bzip2";
        case Wrapper::xz: return "xz";
        case Wrapper::lzma: return "lzma";
        case Wrapper::lz4: return "lz4";
        case Wrapper::zstd: return "zstd";
        case Wrapper::joblib_zfile: return "joblib-zf";
        case Wrapper::sevenzip: return "7z";
        case Wrapper::rar: return "rar";
    }
    return "none";
}

Decompressed decompress(Wrapper w, ByteView in, uint64_t max_out) {
    switch (w) {
        case Wrapper::gzip: return inflate_all(in, 16 + MAX_WBITS, true, max_out);
        case Wrapper::zlib: return inflate_all(in, MAX_WBITS, false, max_out);
        case Wrapper::joblib_zfile: {
            uint64_t at = k_zfile_header;
            if (at < in.size && in.data[at] == ' ') ++at;  // joblib <= 0.8.4 wrote one more
            return inflate_all({in.data + at, in.size - at}, MAX_WBITS, false, max_out);
        }
        case Wrapper::bz2: return bunzip(in, max_out);
        case Wrapper::xz: return unxz(in, false, max_out);
        case Wrapper::lzma: return unxz(in, true, max_out);
        case Wrapper::lz4: return unlz4(in, max_out);
        case Wrapper::zstd: return unzstd(in, max_out);
        case Wrapper::none: case Wrapper::sevenzip: case Wrapper::rar: break;
    }
    Decompressed d;
    d.problem = std::string(wrapper_name(w)) + " is not opened here";
    return d;
}

}  // namespace ckpt
