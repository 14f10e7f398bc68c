// The parts of fingerprints torch 1.13 cannot check for us: the float8 types (torch 1.13 has none),
// the exact float16 decoding at its edges, and the two ways a tensor's bytes are read (pread for large
// contiguous records, the mapping for the rest) agreeing. Everything else is checked against torch and ATen in
// tests/integration/test_verify.py.
#include <catch2/catch.hpp>

#include <cctype>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <functional>
#include <string>
#include <vector>

#include "ckpt/checkpoint.hpp"
#include "ckpt/error.hpp"
#include "ckpt/fingerprint.hpp"
#include "ckpt/report.hpp"
#include "io/json.hpp"
#include "support/builders.hpp"
#include "support/limits.hpp"

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

TEST_CASE("fingerprint: float8_e8m0fnu is 2^(e - 127), 0xFF its NaN; bits dtypes are hashed, not summarised") {
    // torch 2.7's MX scale format: 0x7f = 1, 0x80 = 2, 0x00 = 2^-127 (no zero, no sign)
    TensorStats s = of(DType::float8_e8m0fnu, std::string("\x7f\x80\x00", 3), 3);
    CHECK(*s.max == 2.0);
    CHECK(*s.min == std::ldexp(1.0, -127));
    CHECK(*s.mean == Approx((3.0 + std::ldexp(1.0, -127)) / 3));
    CHECK(of(DType::float8_e8m0fnu, std::string("\xff", 1), 1).nan == 1);
    for (DType d : {DType::bits8, DType::bits1x8, DType::bits2x4, DType::bits4x2, DType::float4_e2m1fn_x2}) {
        TensorStats b = of(d, std::string("\x01\x02", 2), 2);
        CHECK_FALSE(b.mean);
        CHECK(b.hash == of(DType::bits8, std::string("\x01\x02", 2), 2).hash);
        CHECK(dtype_from_name(dtype_name(d)) == d);
    }
    CHECK(dtype_size(DType::bits16) == 2);
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
    CHECK(e.hash.text() == "xxh3-128:99aa06d3014798d86001c324468d497f");  // XXH3-128 of no bytes
    TensorStats one = of(DType::float32, std::string("\x00\x00\x80\x3f", 4), 1);
    CHECK(*one.mean == 1.0);
    CHECK_FALSE(one.std);  // torch: nan for one element; here: absent
    CHECK(of(DType::int8, "\x01\x02", 2).hash == of(DType::uint8, "\x01\x02", 2).hash);  // bytes, not values
    CHECK(of(DType::int8, "\x01\x02", 2).hash != of(DType::int8, "\x02\x01", 2).hash);
}

TEST_CASE("fingerprint: a content hash reads back from its text, and nothing else reads as one") {
    ContentHash h = of(DType::int8, "\x01\x02", 2).hash;
    REQUIRE_FALSE(h.empty());
    std::string text = h.text();
    REQUIRE(text.size() == 41);
    CHECK(ContentHash::parse(text) == h);
    std::string upper = text;
    for (size_t i = 9; i < upper.size(); ++i) upper[i] = static_cast<char>(std::toupper(upper[i]));
    CHECK(ContentHash::parse(upper) == h);
    CHECK(ContentHash::parse(text.substr(0, 40)) == std::nullopt);
    CHECK(ContentHash::parse(text + "0") == std::nullopt);
    CHECK(ContentHash::parse("sha256:" + text.substr(9)) == std::nullopt);
    CHECK(ContentHash::parse(text.substr(0, 40) + "g") == std::nullopt);
    CHECK(ContentHash().text().empty());
    CHECK(ContentHash() != h);
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
                              "min": "-inf", "max": "inf", "abs_mean": null, "l2": 1e-300, "nan": 1, "inf": 2,
                              "hash": "xxh3-128:00112233445566778899AABBCCDDEEFF"})";
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
        R"({"tensors": [{"key": "a", "dtype": "float32", "shape": [1], "hash": "ab"}]})",  // no xxh3-128 hash
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
        if (n == 0) CHECK_THAT(streamed, Catch::Contains("\"hash\":\"xxh3-128:00112233445566778899aabbccddeeff\""));
        if (n + 3 == docs.size()) CHECK_THAT(streamed, Catch::Contains("hash is not \"xxh3-128:\" and 32 hex digits"));
    }
    testing::write_file(dir + "/not.json", "PK\x03\x04 a zip");
    CHECK_FALSE(read_fingerprint_file(dir + "/not.json"));
}

namespace {
std::string safetensors_file(const std::string& header, const std::string& data) {
    std::string h = header;
    h.append((8 - h.size() % 8) % 8, ' ');
    std::string out;
    for (int i = 0; i < 8; ++i) out += static_cast<char>((h.size() >> (8 * i)) & 0xff);
    return out + h + data;
}
}  // namespace

TEST_CASE("fingerprint: a large contiguous tensor read with pread gives what the mapping gives") {
    // Records of 256 KiB and more are read through a 1 MiB buffer: "big" ends inside its second fill,
    // "half" is bfloat16 (its own decoder), "small" still goes through the mapping.
    const uint64_t big = 300001, half = 200000, small = 10;
    std::string data;
    for (uint64_t i = 0; i < big; ++i) {
        float v = static_cast<float>(i % 977) * 0.25f - 100.0f;
        data.append(reinterpret_cast<const char*>(&v), 4);
    }
    for (uint64_t i = 0; i < half; ++i) data += std::string{static_cast<char>(i & 0xff), static_cast<char>(0x3f + (i % 3))};
    for (uint64_t i = 0; i < small; ++i) data.append("\x00\x00\x80\x3f", 4);
    uint64_t b = big * 4, h = b + half * 2, e = h + small * 4;
    std::string header = "{\"big\":{\"dtype\":\"F32\",\"shape\":[" + std::to_string(big) + "],\"data_offsets\":[0," +
                         std::to_string(b) + "]},\"half\":{\"dtype\":\"BF16\",\"shape\":[" + std::to_string(half) +
                         "],\"data_offsets\":[" + std::to_string(b) + "," + std::to_string(h) +
                         "]},\"small\":{\"dtype\":\"F32\",\"shape\":[" + std::to_string(small) + "],\"data_offsets\":[" +
                         std::to_string(h) + "," + std::to_string(e) + "]}}";
    std::string path = testing::scratch_dir("fingerprint_pread") + "/t.safetensors";
    testing::write_file(path, safetensors_file(header, data));
    auto c = Checkpoint::open(path);
    auto want = [&](DType d, uint64_t begin, uint64_t count) {
        return buffer_stats(d, {reinterpret_cast<const uint8_t*>(data.data()) + begin, data.size() - begin}, count);
    };
    TensorStats wb = want(DType::float32, 0, big), wh = want(DType::bfloat16, b, half), ws = want(DType::float32, h, small);
    for (bool hash_only : {false, true}) {
        FingerprintOptions o;
        o.hash_only = hash_only;
        Fingerprint f = fingerprint(*c, o);
        REQUIRE(f.tensors.size() == 3);
        const TensorStats* expected[] = {&wb, &wh, &ws};
        for (size_t i = 0; i < 3; ++i) {
            INFO(f.tensors[i].key << (hash_only ? " (hash only)" : ""));
            CHECK(f.tensors[i].stats.hash == expected[i]->hash);
            if (hash_only) continue;
            CHECK(f.tensors[i].stats.count == expected[i]->count);
            CHECK(*f.tensors[i].stats.mean == *expected[i]->mean);
            CHECK(*f.tensors[i].stats.std == *expected[i]->std);
            CHECK(*f.tensors[i].stats.max == *expected[i]->max);
        }
    }
    // Where no second thread can be started (a process limit), one does the whole scan.
    int alone = testing::in_child_without_threads([&] {
        try {
            FingerprintOptions o;
            o.threads = 2;
            Fingerprint f = fingerprint(*c, o);
            return f.tensors.size() == 3 && f.tensors[0].stats.hash == wb.hash && f.tensors[2].stats.hash == ws.hash ? 0 : 2;
        } catch (...) {
            return 1;
        }
    });
    if (alone < 0) WARN("no child without threads to be had (not root?); that part skipped");
    else CHECK(alone == 0);
    // The file cut short after it was opened: a clean Error naming it (a mapping would fault, SIGBUS).
    REQUIRE(::truncate(path.c_str(), static_cast<off_t>(8 + header.size() + b / 2)) == 0);
    CHECK_THROWS_AS(fingerprint(*c, FingerprintOptions{}), Error);
}

TEST_CASE("fingerprint: a statistic is none, a number, or NaN, and NaN of any bits is a value") {
    Stat none;
    CHECK_FALSE(none.has_value());
    CHECK_FALSE(Stat(std::nullopt));
    CHECK(Stat(std::optional<double>()).has_value() == false);
    Stat mean = 0.25;
    REQUIRE(mean);
    CHECK(*mean == 0.25);
    Stat nan = std::numeric_limits<double>::quiet_NaN();
    REQUIRE(nan.has_value());
    CHECK(std::isnan(*nan));
    // Every NaN bit pattern a tensor's statistic could be, the one that stands for none too.
    for (uint64_t bits : {0x7ff4'0000'dead'beefULL, 0x7ff0'0000'0000'0001ULL, 0xfff8'0000'0000'0000ULL}) {
        double d;
        std::memcpy(&d, &bits, sizeof d);
        Stat s = d;
        CHECK(s.has_value());
        CHECK(std::isnan(*s));
    }
    mean.reset();
    CHECK_FALSE(mean);
    CHECK(mean.value_or(-1) == -1);
    CHECK(sizeof(Stat) == sizeof(double));
}

TEST_CASE("fingerprint: an expanded view is read once per stored element, its hash says which dimensions repeat") {
    // Two float32 elements [1, 2], expanded to 2^25 × 2 (stride 0 on the rows) and to 2 × 2^25
    // (stride 0 on the columns): 2^26 elements each, past the read-in-full bound.
    float stored[2] = {1.0f, 2.0f};
    ByteView bytes{reinterpret_cast<const uint8_t*>(stored), sizeof stored};
    auto view = [](int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
        TensorInfo t;
        t.dtype = DType::float32;
        t.shape = Dims(std::vector<int64_t>{rows, cols});
        t.stride = Dims(std::vector<int64_t>{rs, cs});
        REQUIRE(t.count_elements() == nullptr);
        return t;
    };
    const int64_t n = int64_t{1} << 25;
    TensorInfo rows = view(n, 2, 0, 1), cols = view(2, n, 1, 0);
    CHECK(rows.repeats() == static_cast<uint64_t>(n));
    CHECK_FALSE(view_within_bounds(rows));
    TensorStats a = tensor_stats(rows, bytes), b = tensor_stats(cols, bytes);
    CHECK(a.count == 2 * static_cast<uint64_t>(n));
    CHECK(*a.mean == 1.5);
    CHECK(*a.l2 == Approx(std::sqrt(5.0 * n)));
    CHECK(*a.std == Approx(std::sqrt(0.5 * n / (2.0 * n - 1))));  // unbiased: 2n · 0.25 / (2n − 1)
    CHECK(*a.min == 1.0);
    CHECK(*a.max == 2.0);
    CHECK(a.hash != b.hash);
    CHECK(tensor_stats(view(n, 2, 0, 1), bytes).hash == a.hash);
    // A square of side 2^13 over the same 2^13 stored elements, repeated down the rows or along the
    // columns: the same shape, repeat and elements once, other tensors (its transpose).
    const int64_t m = int64_t{1} << 13;
    std::vector<float> line(static_cast<size_t>(m));
    for (size_t i = 0; i < line.size(); ++i) line[i] = static_cast<float>(i);
    ByteView lb{reinterpret_cast<const uint8_t*>(line.data()), line.size() * 4};
    TensorStats down = tensor_stats(view(m, m, 0, 1), lb), along = tensor_stats(view(m, m, 1, 0), lb);
    CHECK(*down.mean == *along.mean);
    CHECK(down.hash != along.hash);
    // An overlap that is no repeat (stride 1 on both: a 2^13 × 2^13 sliding window over 2^14
    // elements) is refused, not read 2^26 times.
    const int64_t w = int64_t{1} << 13;
    std::vector<float> wide(2 * static_cast<size_t>(w), 0.5f);
    TensorInfo slide = view(w, w, 1, 1);
    CHECK_FALSE(view_within_bounds(slide));
    CHECK_THROWS_AS(tensor_stats(slide, {reinterpret_cast<const uint8_t*>(wide.data()), wide.size() * 4}), Error);
}
