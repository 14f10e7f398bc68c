// The parts of fingerprints torch 1.13 cannot check for us: the float8 types (torch 1.13 has none)
// and the exact float16 decoding at its edges. Everything else is checked against torch and ATen in
// tests/integration/test_verify.py.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "ckpt/error.hpp"
#include "ckpt/fingerprint.hpp"
#include "ckpt/report.hpp"
#include "support/builders.hpp"

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

namespace {
// What reading a fingerprint file gives: its JSON, or the error's kind and message.
std::string outcome(const std::function<Fingerprint()>& read) {
    try {
        return to_json(read()).dump();
    } catch (const Error& e) {
        return "error " + std::to_string(static_cast<int>(e.kind())) + ": " + e.what();
    }
}
}  // namespace

TEST_CASE("fingerprint: the row-by-row file reader agrees with the document reader, error for error") {
    const std::string row = R"({"key": "w", "dtype": "float32", "shape": [2, 3], "count": 6, "mean": 0.5, "std": "nan",
                              "min": "-inf", "max": "inf", "abs_mean": null, "l2": 1e-300, "nan": 1, "inf": 2, "hash": "ab"})";
    const std::vector<std::string> docs = {
        R"({"schema_version": 1, "command": "fingerprint", "file": "a.pth", "file_size": 10, "scope": "all",
            "tool": {"name": "x", "tensors": [1]}, "tensors": [)" + row + ", " + row + R"(, {"key": "b", "dtype": "int8", "shape": []}]})",
        R"({"tensors": [], "file": 61, "scope": ["not a string"]})",
        R"({"tensors": [)" + row + R"(], "tensors": [{"key": "second", "dtype": "bool", "shape": [1]}]})",  // the last counts
        R"({"tensors": [)" + row + R"(], "tensors": {"key": "an object"}})",  // the last is no list
        R"({"tensors": [{"key": 5}], "tensors": 7})",
        R"({"tensors": [{"key": "a", "dtype": "float32", "shape": [1]}, {"dtype": "float32"}, {"key": 5}]})",  // first bad row
        R"({"tensors": [{"key": "a", "dtype": "float32", "shape": [1.5]}]})",
        R"({"tensors": [{"key": "a", "dtype": "float32", "shape": [1], "mean": "x"}]})",
        R"({"tensors": [{"key": "a", "dtype": "float32", "shape": [1], "nan": -1}]})",
        R"({"tensors": [[1, 2], 3, "s", null]})",
        R"({"tensors": {"key": "a"}})",
        R"({"no": "tensors"})",
        R"([{"key": "a", "dtype": "float32", "shape": [1]}])",
        R"({"command": "inspect", "tensors": [{"key": "a", "dtype": "float32", "shape": [1]}]})",
        R"({"tensors": [{"key": 1}], "command": "inspect"})",  // the inspect report is said first
        R"({"tensors": [{"key": "a", "dtype": "float32", "shape": [1], "mean": 4e999}]})",  // out of range
        R"({"tensors": [{"key": "a", "dtype": "float32", "shape": [1],)",                    // cut short
        "\xef\xbb\xbf  {\"tensors\": [{\"key\": \"bom\", \"dtype\": \"uint8\", \"shape\": [0]}]}",
    };
    std::string dir = testing::scratch_dir("fingerprint_stream");
    for (size_t n = 0; n < docs.size(); ++n) {
        std::string path = dir + "/fp" + std::to_string(n) + ".json";
        testing::write_file(path, docs[n]);
        std::string streamed = outcome([&] {
            std::optional<Fingerprint> f = read_fingerprint_file(path);
            REQUIRE(f);
            return *f;
        });
        std::string whole = outcome([&] {
            std::optional<nlohmann::json> j = read_json_file(path);
            REQUIRE(j);
            if (json_string_or(*j, "command") == "inspect")
                throw Error(ErrorKind::usage, path, "an inspect report holds no statistics; write a fingerprint with verify --write-fingerprint");
            return fingerprint_from_json(path, *j);
        });
        INFO(docs[n]);
        CHECK(streamed == whole);
    }
    testing::write_file(dir + "/not.json", "PK\x03\x04 a zip");
    CHECK_FALSE(read_fingerprint_file(dir + "/not.json"));
}
