// The parts of fingerprints torch 1.13 cannot check for us: the float8 types (torch 1.13 has none)
// and the exact float16 decoding at its edges. Everything else is checked against torch and ATen in
// tests/integration/test_verify.py.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "ckpt/fingerprint.hpp"

using namespace ckpt;

namespace {
TensorStats of(DType d, const std::string& bytes, uint64_t n) {
    return buffer_stats(d, {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, n);
}
}  // namespace

TEST_CASE("fingerprint: float8_e4m3fn decodes its whole range; S.1111.111 is its only NaN") {
    // 0x7e = 448 (the largest), 0x01 = 2^-9 (the smallest subnormal), 0xb8 = -1, 0x00 = 0.
    TensorStats s = of(DType::float8_e4m3fn, std::string("\x7e\x01\xb8\x00", 4), 4);
    CHECK(*s.max == 448.0);
    CHECK(*s.min == -1.0);
    CHECK(*s.mean == Approx((448.0 + std::ldexp(1.0, -9) - 1.0) / 4));
    CHECK(s.nan == 0);
    TensorStats n = of(DType::float8_e4m3fn, std::string("\x7f\x3c", 2), 2);
    CHECK(n.nan == 1);
    CHECK(std::isnan(*n.mean));
    CHECK(n.inf == 0);
}

TEST_CASE("fingerprint: float8_e5m2 is float16's top byte: Inf and NaN included") {
    TensorStats s = of(DType::float8_e5m2, std::string("\x7b\x3c", 2), 2);  // 57344, 1
    CHECK(*s.max == 57344.0);
    CHECK(*s.min == 1.0);
    TensorStats i = of(DType::float8_e5m2, std::string("\x7c\xfc\x7d", 3), 3);  // +Inf, -Inf, NaN
    CHECK(i.inf == 2);
    CHECK(i.nan == 1);
}

TEST_CASE("fingerprint: float16 edges, empty and single tensors, hashes of equal bytes") {
    // 0x7bff = 65504, 0x0001 = 2^-24, 0x8000 = -0
    TensorStats h = of(DType::float16, std::string("\xff\x7b\x01\x00\x00\x80", 6), 3);
    CHECK(*h.max == 65504.0);
    CHECK(*h.min == -0.0);
    CHECK(*h.l2 == Approx(65504.0));
    TensorStats e = of(DType::float32, "", 0);
    CHECK(e.count == 0);
    CHECK_FALSE(e.mean);
    CHECK_FALSE(e.min);
    CHECK(e.hash.rfind("xxh3-128:", 0) == 0);
    TensorStats one = of(DType::float32, std::string("\x00\x00\x80\x3f", 4), 1);
    CHECK(*one.mean == 1.0);
    CHECK_FALSE(one.std);  // torch: nan for one element; here: absent
    CHECK(of(DType::int8, "\x01\x02", 2).hash == of(DType::uint8, "\x01\x02", 2).hash);  // bytes, not values
    CHECK(of(DType::int8, "\x01\x02", 2).hash != of(DType::int8, "\x02\x01", 2).hash);
}
