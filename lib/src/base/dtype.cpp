#include "ckpt/dtype.hpp"

#include <array>

namespace ckpt {

namespace {
struct DTypeInfo {
    DType dtype;
    std::string_view name;
    uint64_t size;
    std::string_view storage_class;  // legacy typed storage class, "" if none
    bool floating;
};
constexpr std::array<DTypeInfo, 33> k_dtypes{{
    {DType::float32, "float32", 4, "FloatStorage", true},
    {DType::float64, "float64", 8, "DoubleStorage", true},
    {DType::float16, "float16", 2, "HalfStorage", true},
    {DType::bfloat16, "bfloat16", 2, "BFloat16Storage", true},
    {DType::complex32, "complex32", 4, "ComplexHalfStorage", false},
    {DType::complex64, "complex64", 8, "ComplexFloatStorage", false},
    {DType::complex128, "complex128", 16, "ComplexDoubleStorage", false},
    {DType::uint8, "uint8", 1, "ByteStorage", false},
    {DType::int8, "int8", 1, "CharStorage", false},
    {DType::int16, "int16", 2, "ShortStorage", false},
    {DType::int32, "int32", 4, "IntStorage", false},
    {DType::int64, "int64", 8, "LongStorage", false},
    {DType::boolean, "bool", 1, "BoolStorage", false},
    {DType::qint8, "qint8", 1, "QInt8Storage", false},
    {DType::quint8, "quint8", 1, "QUInt8Storage", false},
    {DType::qint32, "qint32", 4, "QInt32Storage", false},
    {DType::quint4x2, "quint4x2", 1, "QUInt4x2Storage", false},
    {DType::quint2x4, "quint2x4", 1, "QUInt2x4Storage", false},
    {DType::float8_e4m3fn, "float8_e4m3fn", 1, "", true},
    {DType::float8_e5m2, "float8_e5m2", 1, "", true},
    {DType::uint16, "uint16", 2, "", false},
    {DType::uint32, "uint32", 4, "", false},
    {DType::uint64, "uint64", 8, "", false},
    {DType::float8_e4m3fnuz, "float8_e4m3fnuz", 1, "", true},
    {DType::float8_e5m2fnuz, "float8_e5m2fnuz", 1, "", true},
    {DType::bits8, "bits8", 1, "", false},
    {DType::bits16, "bits16", 2, "", false},
    {DType::bits1x8, "bits1x8", 1, "", false},
    {DType::bits2x4, "bits2x4", 1, "", false},
    {DType::bits4x2, "bits4x2", 1, "", false},
    {DType::float8_e8m0fnu, "float8_e8m0fnu", 1, "", true},
    {DType::float4_e2m1fn_x2, "float4_e2m1fn_x2", 1, "", false},
    {DType::untyped, "untyped", 1, "UntypedStorage", false},
}};

const DTypeInfo& info(DType d) {
    for (const auto& i : k_dtypes)
        if (i.dtype == d) return i;
    return k_dtypes.back();
}
}  // namespace

std::string_view dtype_name(DType d) { return info(d).name; }
uint64_t dtype_size(DType d) { return info(d).size; }
bool dtype_is_floating(DType d) { return info(d).floating; }

std::optional<DType> dtype_from_name(std::string_view name) {
    for (const auto& i : k_dtypes)
        if (i.name == name && i.dtype != DType::untyped) return i.dtype;
    // torch's aliases: torch.float is torch.float32, and so on (pickles carry the canonical name,
    // manifests written by hand may not).
    struct Alias { std::string_view alias; DType dtype; };
    static constexpr Alias k_aliases[] = {
        {"float", DType::float32}, {"double", DType::float64}, {"half", DType::float16},
        {"cfloat", DType::complex64}, {"cdouble", DType::complex128}, {"chalf", DType::complex32},
        {"short", DType::int16}, {"int", DType::int32}, {"long", DType::int64},
    };
    for (const auto& a : k_aliases)
        if (a.alias == name) return a.dtype;
    return std::nullopt;
}

std::string_view storage_class_of(DType d) { return d == DType::untyped ? "" : info(d).storage_class; }

std::optional<DType> dtype_from_storage_class(std::string_view name) {
    for (const auto& i : k_dtypes)
        if (!i.storage_class.empty() && i.storage_class == name) return i.dtype;
    return std::nullopt;
}

}  // namespace ckpt
