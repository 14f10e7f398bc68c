// Tensor element types, named as PyTorch names them without "torch.".
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace ckpt {

enum class DType : uint8_t {
    float32, float64, float16, bfloat16,
    complex32, complex64, complex128,
    uint8, int8, int16, int32, int64, boolean,
    qint8, quint8, qint32, quint4x2, quint2x4,
    float8_e4m3fn, float8_e5m2,
    uint16, uint32, uint64,
    float8_e4m3fnuz, float8_e5m2fnuz,  // torch 2.1's AMD float8s: no infinities, no -0, NaN is 0x80
    bits8, bits16, bits1x8, bits2x4, bits4x2,  // raw bits: no arithmetic, hashed but not summarised
    float8_e8m0fnu,    // torch 2.7's exponent-only scale format: 2^(e - 127), 0xFF is NaN
    float4_e2m1fn_x2,  // torch 2.8's two float4s in a byte: an element is the byte (hashed, not summarised)
    untyped,  // torch.UntypedStorage before _rebuild_tensor_v3 says what the bytes are
};

std::string_view dtype_name(DType d);              // "float32", "bool" …
uint64_t dtype_size(DType d);                      // bytes per element (1 for untyped)
std::optional<DType> dtype_from_name(std::string_view name);  // "float32", also "float", "half" …
// The element type of a storage class ("FloatStorage" → float32); nullopt for unknown names.
std::optional<DType> dtype_from_storage_class(std::string_view name);
// The typed storage class torch.save names for a dtype ("FloatStorage"), "" when there is none.
std::string_view storage_class_of(DType d);
bool dtype_is_floating(DType d);

// `n` elements of `from` at `in` written as `to` at `out`, rounded as PyTorch rounds: any real type
// to float32, and float32 to float16 or bfloat16 (round to nearest even). false for other pairs.
bool convert_elements(DType from, DType to, const uint8_t* in, uint64_t n, uint8_t* out);
uint16_t float_to_half_bits(float f);
uint16_t float_to_bf16_bits(float f);

}  // namespace ckpt
