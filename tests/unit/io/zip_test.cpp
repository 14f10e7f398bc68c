#include <catch2/catch.hpp>

#include "ckpt/error.hpp"
#include "io/zip.hpp"
#include "support/builders.hpp"

using namespace ckpt;
using testing::ZipBuilder;

namespace {
ByteView view_of(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }
std::string text(const RecordData& d) { return std::string(d.view().as_chars()); }
}  // namespace

TEST_CASE("zip: stored records are read in place, aligned as torch aligns them") {
    std::string zip = ZipBuilder().add("m/data.pkl", "hello").add("m/data/0", std::string(100, 'x')).build();
    ZipArchive z = ZipArchive::open(view_of(zip));
    REQUIRE(z.entries().size() == 2);
    const ZipEntry* e = z.find("m/data/0");
    REQUIRE(e);
    CHECK(e->size == 100);
    CHECK(z.data_offset(*e) % 64 == 0);
    RecordData d = z.record_data(*e);
    CHECK_FALSE(d.owned());
    CHECK(text(d) == std::string(100, 'x'));
    CHECK(z.compute_crc32(*e) == e->crc32);
    CHECK_FALSE(z.zip64());
}

TEST_CASE("zip: DEFLATE records are inflated and checked") {
    std::string payload;
    for (int i = 0; i < 1000; ++i) payload += "abc" + std::to_string(i);
    std::string zip = ZipBuilder().add("m/data.pkl", payload, true).build();
    ZipArchive z = ZipArchive::open(view_of(zip));
    const ZipEntry* e = z.find("m/data.pkl");
    REQUIRE(e);
    CHECK(e->method == 8);
    RecordData d = z.record_data(*e);
    CHECK(d.owned());
    CHECK(text(d) == payload);
    CHECK(z.compute_crc32(*e) == e->crc32);
}

TEST_CASE("zip: ZIP64 directory fields and end records are read") {
    std::string zip = ZipBuilder().add("m/data.pkl", "pickle").add("m/data/0", "0123456789").build(true);
    ZipArchive z = ZipArchive::open(view_of(zip));
    CHECK(z.zip64());
    const ZipEntry* e = z.find("m/data/0");
    REQUIRE(e);
    CHECK(e->size == 10);
    CHECK(text(z.record_data(*e)) == "0123456789");
}

TEST_CASE("zip: a broken directory is an error, never a crash") {
    std::string good = ZipBuilder().add("m/data.pkl", "pickle").build();
    SECTION("no end record") {
        CHECK_THROWS_AS(ZipArchive::open(view_of(good.substr(0, good.size() - 5))), Error);
    }
    SECTION("central directory offset outside the file") {
        std::string bad = good;
        size_t eocd = bad.size() - 22;
        bad[eocd + 16] = '\xff';
        bad[eocd + 17] = '\xff';
        CHECK_THROWS_WITH(ZipArchive::open(view_of(bad)), Catch::Contains("outside the file"));
    }
    SECTION("entry count that cannot fit") {
        std::string bad = good;
        size_t eocd = bad.size() - 22;
        bad[eocd + 8] = bad[eocd + 10] = '\xff';
        bad[eocd + 9] = bad[eocd + 11] = '\x7f';
        CHECK_THROWS_WITH(ZipArchive::open(view_of(bad)), Catch::Contains("claims"));
    }
    SECTION("local header signature damaged") {
        std::string bad = good;
        bad[0] = 'X';
        ZipArchive z = ZipArchive::open(view_of(bad));
        CHECK_THROWS_WITH(z.record_data(z.entries()[0]), Catch::Contains("bad local header signature"));
    }
    SECTION("duplicate names") {
        std::string dup = ZipBuilder().add("m/a", "1").add("m/a", "2").build();
        CHECK_THROWS_WITH(ZipArchive::open(view_of(dup)), Catch::Contains("duplicate entry"));
    }
    SECTION("deflate stream damaged") {
        std::string payload(5000, 'q');
        std::string z = ZipBuilder().add("m/data.pkl", payload, true).build();
        size_t data = 30 + std::string("m/data.pkl").size();
        for (size_t i = data; i < data + 8; ++i) z[i] = '\xff';
        ZipArchive a = ZipArchive::open(view_of(z));
        CHECK_THROWS_AS(a.record_data(a.entries()[0]), Error);
    }
}

TEST_CASE("zip: a deflate bomb is refused before it is inflated") {
    std::string payload(50'000'000, '\0');
    std::string zip = ZipBuilder().add("m/data.pkl", payload, true).build();
    ZipLimits limits;
    limits.max_inflate_ratio = 100;
    ZipArchive z = ZipArchive::open(view_of(zip), limits);
    try {
        z.record_data(z.entries()[0]);
        FAIL("inflated a bomb");
    } catch (const Error& e) {
        CHECK(e.kind() == ErrorKind::limit);
    }
}

TEST_CASE("crc32: the carry-less multiply path equals zlib on every length and alignment") {
    std::string data(5000, '\0');
    uint32_t seed = 12345;
    for (auto& ch : data) {
        seed = seed * 1103515245u + 12345u;
        ch = static_cast<char>(seed >> 24);
    }
    const auto* base = reinterpret_cast<const uint8_t*>(data.data());
    for (uint64_t offset = 0; offset < 17; ++offset)
        for (uint64_t n = 0; n + offset <= data.size(); n += (n < 300 ? 1 : 37)) {
            ckpt::ByteView v{base + offset, n};
            REQUIRE(ckpt::crc32_of(v) == ckpt::crc32_portable(v));
            REQUIRE(ckpt::crc32_of(v, 0xdeadbeef) == ckpt::crc32_portable(v, 0xdeadbeef));
        }
    // Continuing across a split gives the CRC of the whole.
    ckpt::ByteView whole{base, 4096}, head{base, 1000}, tail{base + 1000, 3096};
    CHECK(ckpt::crc32_of(tail, ckpt::crc32_of(head)) == ckpt::crc32_of(whole));
}
