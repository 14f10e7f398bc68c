// A tar as Python's tarfile reads it (scan/tar_reading.hpp): headers built here block by block.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <string>

#include "scan/tar_reading.hpp"

using namespace ckpt;

namespace {

constexpr size_t k_block = 512;

ByteView view(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

void set(std::string& h, size_t at, const std::string& text) { h.replace(at, text.size(), text); }

std::string octal(uint64_t v, int digits) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%0*llo", digits, static_cast<unsigned long long>(v));
    return buf;
}

// The header's sum with its chksum field counted as eight spaces: bytes as unsigned or as signed.
int64_t header_sum(const std::string& h, bool signed_bytes) {
    int64_t sum = 0;
    for (size_t i = 0; i < k_block; ++i) {
        if (i >= 148 && i < 156) sum += ' ';
        else sum += signed_bytes ? static_cast<int64_t>(static_cast<int8_t>(h[i])) : static_cast<int64_t>(static_cast<uint8_t>(h[i]));
    }
    return sum;
}

// Writes the chksum field as tarfile writes it: six octal digits, NUL, space.
void seal(std::string& h, int64_t sum) { set(h, 148, octal(static_cast<uint64_t>(sum), 6) + std::string("\0 ", 2)); }
void seal(std::string& h, bool signed_bytes = false) { seal(h, header_sum(h, signed_bytes)); }

// A ustar header, unsealed: name, mode, ids, size, mtime, type, link, magic.
std::string raw_header(const std::string& name, uint64_t size, char type = '0', const std::string& link = "") {
    std::string h(k_block, '\0');
    set(h, 0, name.substr(0, 100));
    set(h, 100, "0000644");
    set(h, 108, "0001750");
    set(h, 116, "0001750");
    set(h, 124, octal(size, 11));
    set(h, 136, "14712345670");
    h[156] = type;
    set(h, 157, link.substr(0, 100));
    set(h, 257, std::string("ustar\0", 6));
    set(h, 263, "00");
    set(h, 265, "user");
    set(h, 297, "group");
    return h;
}

std::string header(const std::string& name, uint64_t size, char type = '0', const std::string& link = "") {
    std::string h = raw_header(name, size, type, link);
    seal(h);
    return h;
}

// Data padded to whole blocks.
std::string blocks(const std::string& data) { return data + std::string((k_block - data.size() % k_block) % k_block, '\0'); }

std::string member(const std::string& name, const std::string& data) { return header(name, data.size()) + blocks(data); }

std::string end_blocks() { return std::string(2 * k_block, '\0'); }

// One pax record, "LEN key=value\n", LEN counting its own digits.
std::string pax_record(const std::string& key, const std::string& value) {
    size_t base = 1 + key.size() + 1 + value.size() + 1;
    size_t len = base + 1;
    while (std::to_string(len).size() + base != len) len = std::to_string(len).size() + base;
    return std::to_string(len) + " " + key + "=" + value + "\n";
}

}  // namespace

TEST_CASE("tar: members are listed with where their data is and how long it is") {
    std::string big(600, 'p');
    std::string t = member("storages", "abc") + member("pickle", big) + end_blocks();
    TarReading r = read_tar(view(t));
    CHECK(r.accepted);
    CHECK(r.problem.empty());
    REQUIRE(r.members.size() == 2);
    CHECK(r.members[0].name == "storages");
    CHECK(r.members[0].header == 0);
    CHECK(r.members[0].data == 512);
    CHECK(r.members[0].size == 3);
    CHECK(r.members[0].regular());
    CHECK(r.members[1].name == "pickle");
    CHECK(r.members[1].header == 1024);
    CHECK(r.members[1].data == 1536);
    CHECK(r.members[1].size == 600);
    CHECK(t.substr(r.members[1].data, r.members[1].size) == big);
}

TEST_CASE("tar: the checksum counts its own field as spaces, as unsigned or as signed bytes") {
    // A name byte past 0x7f makes the two sums differ.
    std::string h = raw_header("caf\xe9", 0);
    REQUIRE(header_sum(h, false) != header_sum(h, true));
    SECTION("the unsigned sum") {
        seal(h, false);
        TarReading r = read_tar(view(h + end_blocks()));
        CHECK(r.accepted);
        REQUIRE(r.members.size() == 1);
        CHECK(r.members[0].name == "caf\xe9");
    }
    SECTION("the signed sum") {
        seal(h, true);
        TarReading r = read_tar(view(h + end_blocks()));
        CHECK(r.accepted);
        CHECK(r.members.size() == 1);
    }
    SECTION("a sum with the field counted as NULs is no checksum") {
        std::string ascii = raw_header("plain", 0);  // (for "caf\xe9" that sum is the signed one)
        seal(ascii, header_sum(ascii, false) - 8 * ' ');
        TarReading r = read_tar(view(ascii + end_blocks()));
        CHECK_FALSE(r.accepted);
        CHECK(r.members.empty());
    }
    SECTION("a sum one off is no checksum") {
        seal(h, header_sum(h, false) + 1);
        CHECK_FALSE(read_tar(view(h + end_blocks())).accepted);
    }
}

TEST_CASE("tar: a bad first header is no tar; a bad later one ends the list with a problem") {
    std::string bad = header("pickle", 3);
    bad[0] = 'P';  // the checksum no longer matches
    CHECK_FALSE(read_tar(view(bad + blocks("abc") + end_blocks())).accepted);
    TarReading r = read_tar(view(member("storages", "abc") + bad + blocks("abc") + end_blocks()));
    CHECK(r.accepted);
    REQUIRE(r.members.size() == 1);
    CHECK(r.members[0].name == "storages");
    CHECK(r.problem.find("checksum") != std::string::npos);
    CHECK(r.problem.find("1024") != std::string::npos);
}

TEST_CASE("tar: an all-zero first block is an empty tar; less than a block is none") {
    TarReading r = read_tar(view(end_blocks()));
    CHECK(r.accepted);
    CHECK(r.members.empty());
    CHECK(r.problem.empty());
    CHECK_FALSE(read_tar(view(std::string(100, '\0'))).accepted);
}

TEST_CASE("tar: a GNU 'L' member gives the next member its long name") {
    std::string long_name = "archive/" + std::string(150, 'n') + "/pickle";
    std::string t = header("././@LongLink", long_name.size() + 1, 'L') + blocks(long_name + '\0') +
                    member(long_name.substr(0, 100), "xyz") + end_blocks();
    TarReading r = read_tar(view(t));
    CHECK(r.accepted);
    REQUIRE(r.members.size() == 1);
    CHECK(r.members[0].name == long_name);
    CHECK(r.members[0].header == 1024);
    CHECK(r.members[0].data == 1536);
    CHECK(t.substr(r.members[0].data, r.members[0].size) == "xyz");
    CHECK(tar_find(r, long_name) == 0);
}

TEST_CASE("tar: a pax 'x' path overrides the next member's name, and a ustar prefix is joined") {
    std::string pax = pax_record("path", "renamed/pickle") + pax_record("mtime", "1700000000.5");
    std::string prefixed = raw_header("inner", 1);
    set(prefixed, 345, "outer/dir");
    seal(prefixed);
    std::string t = header("./PaxHeaders/x", pax.size(), 'x') + blocks(pax) + member("original", "abc") + member("after", "d") +
                    prefixed + blocks("e") + end_blocks();
    TarReading r = read_tar(view(t));
    CHECK(r.accepted);
    REQUIRE(r.members.size() == 3);
    CHECK(r.members[0].name == "renamed/pickle");
    CHECK(t.substr(r.members[0].data, r.members[0].size) == "abc");
    CHECK(r.members[1].name == "after");  // an 'x' record is for the next member only
    CHECK(r.members[2].name == "outer/dir/inner");
    CHECK(tar_find(r, "original") == SIZE_MAX);
}

TEST_CASE("tar: a global pax 'g' record applies to every later member") {
    std::string g = pax_record("path", "global/name");
    std::string t = member("first", "1") + header("pax_global_header", g.size(), 'g') + blocks(g) + member("second", "2") +
                    member("third", "3") + end_blocks();
    TarReading r = read_tar(view(t));
    CHECK(r.accepted);
    REQUIRE(r.members.size() == 3);
    CHECK(r.members[0].name == "first");
    CHECK(r.members[1].name == "global/name");
    CHECK(r.members[2].name == "global/name");
    CHECK(tar_find(r, "global/name") == 2);
}

TEST_CASE("tar: tar_find gives the last member of a name") {
    std::string t = member("pickle", "old") + member("other", "x") + member("pickle", "new") + end_blocks();
    TarReading r = read_tar(view(t));
    REQUIRE(r.members.size() == 3);
    size_t i = tar_find(r, "pickle");
    REQUIRE(i == 2);
    CHECK(t.substr(r.members[i].data, r.members[i].size) == "new");
    CHECK(tar_find(r, "missing") == SIZE_MAX);
}

TEST_CASE("tar: a symlink member keeps its type and its target") {
    std::string t = header("pickle", 0, '2', "../../etc/passwd") + member("tensors", "t") + end_blocks();
    TarReading r = read_tar(view(t));
    CHECK(r.accepted);
    REQUIRE(r.members.size() == 2);
    CHECK(r.members[0].type == '2');
    CHECK(r.members[0].link == "../../etc/passwd");
    CHECK_FALSE(r.members[0].regular());
    CHECK(r.members[1].header == 512);  // a link has no data blocks
    CHECK(r.members[1].name == "tensors");
}

TEST_CASE("tar: sizes with a 0o prefix, blanks around them or in base-256 are read") {
    const std::string data(15, 'd');
    auto with_size = [&](const std::string& field) {
        std::string h = raw_header("pickle", 0);
        set(h, 124, std::string(12, '\0'));
        set(h, 124, field);
        seal(h);
        return h + blocks(data) + member("next", "n") + end_blocks();
    };
    const std::string base256 = std::string("\x80", 1) + std::string(10, '\0') + "\x0f";
    for (const std::string& field : {std::string("0o17"), std::string("  17  "), std::string(" 0o0000017"), base256}) {
        CAPTURE(field);
        TarReading r = read_tar(view(with_size(field)));
        CHECK(r.accepted);
        CHECK(r.problem.empty());
        REQUIRE(r.members.size() == 2);
        CHECK(r.members[0].size == 15);
        CHECK(r.members[1].header == 1024);
        CHECK(r.members[1].name == "next");
    }
}
