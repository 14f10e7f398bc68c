#include <catch2/catch.hpp>

#include "ckpt/bytes.hpp"
#include "ckpt/error.hpp"

using namespace ckpt;

TEST_CASE("ByteReader reads little-endian integers and refuses to run past the end") {
    const uint8_t data[] = {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, '\n', 'x'};
    ByteReader r(ByteView{data, sizeof data}, "test", 100);
    CHECK(r.u16le() == 0x0201);
    CHECK(r.u32le() == 0x06050403);
    CHECK(r.file_offset() == 106);
    CHECK(r.line() == std::string_view("\x07\x08\x09", 3));
    CHECK(r.remaining() == 1);
    try {
        r.u32le();
        FAIL("no throw");
    } catch (const Error& e) {
        CHECK(e.kind() == ErrorKind::corrupt);
        CHECK(e.offset() == 110u);
        CHECK(std::string(e.what()).find("truncated") != std::string::npos);
    }
}

TEST_CASE("A lying length costs nothing: bytes() checks before it takes") {
    const uint8_t data[] = {1, 2, 3};
    ByteReader r(ByteView{data, 3}, "test");
    CHECK_THROWS_AS(r.bytes(~0ull), Error);
    CHECK(r.pos() == 0);
    CHECK_THROWS_AS(r.line(), Error);  // no newline at all
}

TEST_CASE("checked arithmetic reports overflow") {
    CHECK(checked_mul(1ull << 32, 1ull << 31).value() == 1ull << 63);
    CHECK_FALSE(checked_mul(1ull << 32, 1ull << 32).has_value());
    CHECK_FALSE(checked_add(~0ull, 1).has_value());
    ByteView v{nullptr, 10};
    CHECK(v.sub(2, 8).has_value());
    CHECK_FALSE(v.sub(2, 9).has_value());
    CHECK_FALSE(v.sub(~0ull, 2).has_value());
}
