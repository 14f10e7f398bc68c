// Element conversions the merged views need, done as PyTorch does them: to float32 (DeepSpeed's
// reference merge casts buffers so, `.float()`), and float32 down to float16 and bfloat16 with
// round-to-nearest-even (to hold ZeRO's 16-bit module weights against their fp32 masters).
#include "ckpt/dtype.hpp"

#include <cmath>
#include <cstring>

namespace ckpt {

namespace {

template <class T>
T load(const uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

float half_to_float(uint16_t h) {
    uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    uint32_t bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);  // inf, nan
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else {  // subnormal: normalise
        int e = -1;
        do {
            ++e;
            man <<= 1;
        } while (!(man & 0x400));
        bits = sign | (static_cast<uint32_t>(112 - e) << 23) | ((man & 0x3ff) << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

}  // namespace

uint16_t float_to_half_bits(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t abs = x & 0x7fffffffu;
    if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00 | ((abs >> 13) & 0x3ff));  // nan, kept quiet
    if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00);  // rounds past 65504: inf
    if (abs < 0x38800000u) {  // below the smallest normal half: subnormal or zero, rounded to nearest even
        if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // under half the smallest subnormal
        uint32_t man = (abs & 0x7fffff) | 0x800000;
        int shift = 126 - static_cast<int>(abs >> 23);  // 14 + (113 - e) … the subnormal's position
        uint32_t q = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) ++q;
        return static_cast<uint16_t>(sign | q);
    }
    uint32_t bits = abs - 0x38000000u;  // rebias the exponent by 112
    uint32_t q = bits >> 13, rem = bits & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (q & 1))) ++q;
    return static_cast<uint16_t>(sign | q);
}

uint16_t float_to_bf16_bits(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // nan, kept quiet
    uint32_t rounding = 0x7fff + ((x >> 16) & 1);
    return static_cast<uint16_t>((x + rounding) >> 16);
}

bool convert_elements(DType from, DType to, const uint8_t* in, uint64_t n, uint8_t* out) {
    if (from == to) {
        std::memcpy(out, in, n * dtype_size(from));
        return true;
    }
    if (to == DType::float32) {
        float* o = reinterpret_cast<float*>(out);
        auto each = [&](auto get, size_t width) {
            for (uint64_t i = 0; i < n; ++i) {
                float v = get(in + i * width);
                std::memcpy(o + i, &v, 4);
            }
            return true;
        };
        switch (from) {
            case DType::float16: return each([](const uint8_t* p) { return half_to_float(load<uint16_t>(p)); }, 2);
            case DType::bfloat16:
                return each([](const uint8_t* p) {
                    uint32_t b = static_cast<uint32_t>(load<uint16_t>(p)) << 16;
                    float f;
                    std::memcpy(&f, &b, 4);
                    return f;
                }, 2);
            case DType::float64: return each([](const uint8_t* p) { return static_cast<float>(load<double>(p)); }, 8);
            case DType::int64: return each([](const uint8_t* p) { return static_cast<float>(load<int64_t>(p)); }, 8);
            case DType::int32: return each([](const uint8_t* p) { return static_cast<float>(load<int32_t>(p)); }, 4);
            case DType::int16: return each([](const uint8_t* p) { return static_cast<float>(load<int16_t>(p)); }, 2);
            case DType::int8: return each([](const uint8_t* p) { return static_cast<float>(load<int8_t>(p)); }, 1);
            case DType::uint8: return each([](const uint8_t* p) { return static_cast<float>(*p); }, 1);
            case DType::boolean: return each([](const uint8_t* p) { return *p ? 1.0f : 0.0f; }, 1);
            default: return false;
        }
    }
    if (from == DType::float32 && (to == DType::float16 || to == DType::bfloat16)) {
        for (uint64_t i = 0; i < n; ++i) {
            float f = load<float>(in + 4 * i);
            uint16_t b = to == DType::float16 ? float_to_half_bits(f) : float_to_bf16_bits(f);
            std::memcpy(out + 2 * i, &b, 2);
        }
        return true;
    }
    return false;
}

}  // namespace ckpt
