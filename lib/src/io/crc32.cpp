// CRC-32 of the zip format (reflected polynomial 0xEDB88320, the one zlib computes).
//
// verify checks the CRC of every record, so this runs over every byte of a checkpoint. zlib's
// table-driven crc32 does ~1.1 GB/s here, which alone would be 4× the whole time budget of verify on
// a 1 GiB file. On CPUs with carry-less multiply (every x86-64 since ~2010) the bulk is folded 64 bytes
// at a time with PCLMULQDQ, as described in Intel's "Fast CRC Computation for Generic Polynomials
// Using PCLMULQDQ Instruction" (Gopal et al., 2009): four 128-bit lanes are each multiplied by x^512
// mod P and xored with the next 64 bytes; the lanes are folded into one, reduced to 64 and then 32
// bits with a Barrett reduction. The constants are those powers of x mod P, bit-reflected. Short
// inputs and the tail (< 16 bytes) go through zlib. Tests compare the two on every length and
// alignment up to a few KiB.
#include <zlib.h>

#include <algorithm>
#include <cstdint>

#include "io/zip.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#define CKPT_HAVE_CLMUL 1
#endif

namespace ckpt {

namespace {

uint32_t crc32_zlib(const uint8_t* p, uint64_t n, uint32_t crc) {
    uLong c = crc;
    while (n > 0) {
        uInt chunk = static_cast<uInt>(std::min<uint64_t>(n, 1u << 30));
        c = ::crc32(c, p, chunk);
        p += chunk;
        n -= chunk;
    }
    return static_cast<uint32_t>(c);
}

#ifdef CKPT_HAVE_CLMUL
// x^(512+64) and x^512 mod P; x^(128+64) and x^128 mod P; x^64 mod P; P and Barrett's mu (all
// bit-reflected, 33 bits).
alignas(16) constexpr uint64_t k_fold4[2] = {0x0154442bd4, 0x01c6e41596};
alignas(16) constexpr uint64_t k_fold1[2] = {0x01751997d0, 0x00ccaa009e};
alignas(16) constexpr uint64_t k_fold64[2] = {0x0163cd6124, 0};
alignas(16) constexpr uint64_t k_barrett[2] = {0x01db710641, 0x01f7011641};

__attribute__((target("pclmul,sse4.1")))
__m128i fold(__m128i acc, __m128i k, __m128i next) {
    __m128i lo = _mm_clmulepi64_si128(acc, k, 0x00);
    __m128i hi = _mm_clmulepi64_si128(acc, k, 0x11);
    return _mm_xor_si128(_mm_xor_si128(lo, hi), next);
}

// `n` >= 64 and a multiple of 16; `crc` is the running CRC in its inverted (register) form.
__attribute__((target("pclmul,sse4.1")))
uint32_t crc32_clmul(const uint8_t* p, uint64_t n, uint32_t crc) {
    auto load = [](const uint8_t* q) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(q)); };
    __m128i a = _mm_xor_si128(load(p), _mm_cvtsi32_si128(static_cast<int>(crc)));
    __m128i b = load(p + 16), c = load(p + 32), d = load(p + 48);
    p += 64;
    n -= 64;
    const __m128i k4 = _mm_load_si128(reinterpret_cast<const __m128i*>(k_fold4));
    while (n >= 64) {
        a = fold(a, k4, load(p));
        b = fold(b, k4, load(p + 16));
        c = fold(c, k4, load(p + 32));
        d = fold(d, k4, load(p + 48));
        p += 64;
        n -= 64;
    }
    const __m128i k1 = _mm_load_si128(reinterpret_cast<const __m128i*>(k_fold1));
    a = fold(a, k1, b);
    a = fold(a, k1, c);
    a = fold(a, k1, d);
    while (n >= 16) {
        a = fold(a, k1, load(p));
        p += 16;
        n -= 16;
    }
    // 128 → 64 bits.
    const __m128i low32 = _mm_setr_epi32(~0, 0, ~0, 0);
    __m128i t = _mm_clmulepi64_si128(a, k1, 0x10);
    a = _mm_xor_si128(_mm_srli_si128(a, 8), t);
    t = _mm_srli_si128(a, 4);
    a = _mm_and_si128(a, low32);
    a = _mm_clmulepi64_si128(a, _mm_loadl_epi64(reinterpret_cast<const __m128i*>(k_fold64)), 0x00);
    a = _mm_xor_si128(a, t);
    // Barrett reduction 64 → 32 bits.
    const __m128i pk = _mm_load_si128(reinterpret_cast<const __m128i*>(k_barrett));
    t = _mm_and_si128(a, low32);
    t = _mm_clmulepi64_si128(t, pk, 0x10);
    t = _mm_and_si128(t, low32);
    t = _mm_clmulepi64_si128(t, pk, 0x00);
    a = _mm_xor_si128(a, t);
    return static_cast<uint32_t>(_mm_extract_epi32(a, 1));
}

bool cpu_has_clmul() {
    static const bool yes = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
    return yes;
}
#endif

}  // namespace

uint32_t crc32_of(ByteView view, uint32_t crc) {
    const uint8_t* p = view.data;
    uint64_t n = view.size;
#ifdef CKPT_HAVE_CLMUL
    if (n >= 64 && cpu_has_clmul()) {
        uint64_t bulk = n & ~uint64_t{15};
        crc = ~crc32_clmul(p, bulk, ~crc);
        p += bulk;
        n -= bulk;
    }
#endif
    return crc32_zlib(p, n, crc);
}

uint32_t crc32_portable(ByteView view, uint32_t crc) { return crc32_zlib(view.data, view.size, crc); }

}  // namespace ckpt
