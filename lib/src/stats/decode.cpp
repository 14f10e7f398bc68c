// Element decoding for the statistics: a tensor's bytes, any dtype torch saves, as float64 numbers
// (fingerprint.cpp sums them). Exact for every type, float8s and bfloat16 included, and vectorised
// where checkpoints spend their time (float32, float16, bfloat16).
#include "stats/decode.hpp"

#include <array>
#include <cmath>
#include <cstring>
#include <limits>

namespace ckpt::detail {

namespace {

constexpr double k_inf = std::numeric_limits<double>::infinity();

typedef double v4d __attribute__((vector_size(32)));
typedef int64_t v4i __attribute__((vector_size(32)));

double half_bits_to_double(uint16_t h) {
    uint32_t sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    double v = exp == 0    ? std::ldexp(static_cast<double>(man), -24)
               : exp == 31 ? (man ? std::numeric_limits<double>::quiet_NaN() : k_inf)
                           : std::ldexp(static_cast<double>(man + 1024), static_cast<int>(exp) - 25);
    return sign ? -v : v;
}

const std::array<double, 65536>& half_table() {
    static const auto* table = [] {
        auto* t = new std::array<double, 65536>;
        for (uint32_t i = 0; i < 65536; ++i) (*t)[i] = half_bits_to_double(static_cast<uint16_t>(i));
        return t;
    }();
    return *table;
}

// float8_e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities, S.1111.111 is NaN.
double e4m3_to_double(uint8_t b) {
    uint32_t sign = b >> 7, exp = (b >> 3) & 0xf, man = b & 7;
    double v = exp == 0 ? std::ldexp(static_cast<double>(man), -9)
                        : (exp == 15 && man == 7) ? std::numeric_limits<double>::quiet_NaN()
                                                  : std::ldexp(static_cast<double>(man + 8), static_cast<int>(exp) - 10);
    return sign ? -v : v;
}

// The fnuz float8s (torch.float8_e4m3fnuz, float8_e5m2fnuz): exponent bias one more than their
// OCP cousins' (8, 16), no infinities and no negative zero: 0x80 is the one NaN.
double fnuz_to_double(uint8_t b, int man_bits, int bias) {
    if (b == 0x80) return std::numeric_limits<double>::quiet_NaN();
    uint32_t sign = b >> 7, exp = (b & 0x7f) >> man_bits, man = b & ((1u << man_bits) - 1);
    double v = exp == 0 ? std::ldexp(static_cast<double>(man), 1 - bias - man_bits)
                        : std::ldexp(static_cast<double>(man + (1u << man_bits)), static_cast<int>(exp) - bias - man_bits);
    return sign ? -v : v;
}

// torch.float8_e8m0fnu: an unsigned exponent alone, 2^(e - 127); 0xFF is NaN, there is no zero.
double e8m0_to_double(uint8_t b) { return b == 0xff ? std::numeric_limits<double>::quiet_NaN() : std::ldexp(1.0, static_cast<int>(b) - 127); }

template <class T>
T load(const uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
}


template <class T>
size_t decode_as(const uint8_t* p, size_t n, double* out) {
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<double>(load<T>(p + i * sizeof(T)));
    return n;
}
typedef float v4f __attribute__((vector_size(16)));

// float32 is nearly every checkpoint's dtype: four at a time.
__attribute__((target_clones("avx2", "default")))
size_t decode_float32(const uint8_t* p, size_t n, double* out) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        v4f f;
        std::memcpy(&f, p + 4 * i, sizeof f);
        v4d d = __builtin_convertvector(f, v4d);
        std::memcpy(out + i, &d, sizeof d);
    }
    for (; i < n; ++i) out[i] = static_cast<double>(load<float>(p + 4 * i));
    return n;
}

size_t decode_bool(const uint8_t* p, size_t n, double* out) {
    for (size_t i = 0; i < n; ++i) out[i] = p[i] != 0;
    return n;
}
size_t decode_half(const uint8_t* p, size_t n, double* out) {
    const auto& t = half_table();
    for (size_t i = 0; i < n; ++i) out[i] = t[load<uint16_t>(p + 2 * i)];
    return n;
}
size_t decode_bf16(const uint8_t* p, size_t n, double* out) {
    for (size_t i = 0; i < n; ++i) {
        uint32_t bits = static_cast<uint32_t>(load<uint16_t>(p + 2 * i)) << 16;
        out[i] = static_cast<double>(load<float>(reinterpret_cast<const uint8_t*>(&bits)));
    }
    return n;
}
size_t decode_e5m2(const uint8_t* p, size_t n, double* out) {
    const auto& t = half_table();  // e5m2 is the top byte of a float16
    for (size_t i = 0; i < n; ++i) out[i] = t[static_cast<uint16_t>(p[i] << 8)];
    return n;
}
// A one-byte float type through a table of its 256 values.
template <double (*Value)(uint8_t)>
size_t decode_byte_table(const uint8_t* p, size_t n, double* out) {
    static const auto table = [] {
        std::array<double, 256> t{};
        for (uint32_t i = 0; i < 256; ++i) t[i] = Value(static_cast<uint8_t>(i));
        return t;
    }();
    for (size_t i = 0; i < n; ++i) out[i] = table[p[i]];
    return n;
}
template <int ManBits, int Bias>
double fnuz_value(uint8_t b) { return fnuz_to_double(b, ManBits, Bias); }
// Complex elements are (re, im) pairs: 2n parts in a row, as torch.view_as_real lays them out.
template <Decoder Part>
size_t decode_complex(const uint8_t* p, size_t n, double* out) {
    return Part(p, 2 * n, out);
}

}  // namespace

Decoder decoder_for(DType d) {
    switch (d) {
        case DType::float32: return decode_float32;
        case DType::float64: return decode_as<double>;
        case DType::float16: return decode_half;
        case DType::bfloat16: return decode_bf16;
        case DType::float8_e5m2: return decode_e5m2;
        case DType::float8_e4m3fn: return decode_byte_table<e4m3_to_double>;
        case DType::float8_e4m3fnuz: return decode_byte_table<fnuz_value<3, 8>>;
        case DType::float8_e5m2fnuz: return decode_byte_table<fnuz_value<2, 16>>;
        case DType::float8_e8m0fnu: return decode_byte_table<e8m0_to_double>;
        case DType::complex32: return decode_complex<decode_half>;
        case DType::complex64: return decode_complex<decode_float32>;
        case DType::complex128: return decode_complex<decode_as<double>>;
        case DType::uint8: return decode_as<uint8_t>;
        case DType::int8: return decode_as<int8_t>;
        case DType::int16: return decode_as<int16_t>;
        case DType::int32: return decode_as<int32_t>;
        case DType::int64: return decode_as<int64_t>;
        case DType::uint16: return decode_as<uint16_t>;
        case DType::uint32: return decode_as<uint32_t>;
        case DType::uint64: return decode_as<uint64_t>;
        case DType::boolean: return decode_bool;
        default: return nullptr;  // quantized, untyped: hashed, not summarised
    }
}

}  // namespace ckpt::detail
