// One zip read as torch's miniz reads it and as Python's zipfile reads it (scan/zip_readings.hpp).
// The expected answers for duplicate names, case and sizes are what the real miniz 3.0.2 of torch and
// CPython's zipfile do with the same bytes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "scan/zip_readings.hpp"
#include "support/builders.hpp"

using namespace ckpt;
using testing::ZipBuilder;

namespace {

ByteView view(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

void set_u16(std::string& b, size_t at, uint16_t v) {
    b[at] = char(v & 0xff);
    b[at + 1] = char(v >> 8);
}
void set_u32(std::string& b, size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) b[at + i] = char((v >> (8 * i)) & 0xff);
}

// A reading with every member's local header read, as scan reads the members it wants.
ZipReading torch_of(const std::string& file) {
    ZipReading z = read_zip_as_torch(view(file));
    for (ZipMember& m : z.members) read_local_header(view(file), z, m);
    return z;
}
ZipReading zipfile_of(const std::string& file) {
    ZipReading z = read_zip_as_zipfile(view(file));
    for (ZipMember& m : z.members) read_local_header(view(file), z, m);
    return z;
}

// The bytes `reader` hands over for member index `i` (stored or inflated, no cap that matters here).
std::string bytes_of(const std::string& file, const ZipReading& z, size_t i, uint64_t cap = 1 << 20) {
    REQUIRE(i < z.members.size());
    std::vector<uint8_t> owned;
    std::string problem;
    ByteView b = member_bytes(view(file), z, z.members[i], cap, owned, problem);
    return std::string(b.as_chars());
}

// One line that holds every part.
bool line_with(const std::vector<std::string>& lines, const std::vector<std::string>& parts) {
    return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) {
        return std::all_of(parts.begin(), parts.end(), [&](const std::string& p) { return l.find(p) != std::string::npos; });
    });
}

bool mentions(const std::vector<std::string>& lines, const std::string& what) {
    return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(what) != std::string::npos; });
}

}  // namespace

TEST_CASE("zip readings: a plain torch zip reads the same to torch and to zipfile") {
    std::string z = ZipBuilder().add("archive/data.pkl", "PICKLE").add("archive/data/0", "0123456789").build();
    ZipReading t = torch_of(z), p = zipfile_of(z);
    REQUIRE(t.ok());
    REQUIRE(p.ok());
    CHECK(std::string(t.reader) == "torch");
    CHECK(std::string(p.reader) == "zipfile");
    CHECK(t.members.size() == 2);
    CHECK(p.members.size() == 2);
    CHECK(p.shift == 0);
    CHECK(t.eocd == z.size() - 22);
    CHECK(torch_root(t) == "archive");
    // The directory alone is read until a member's local header is asked for.
    CHECK_FALSE(read_zip_as_torch(view(z)).members[0].local_read);
    CHECK(t.members[0].local_read);
    CHECK(t.members[0].local_name == "archive/data.pkl");
    size_t ti = torch_find(t, view(z), "archive/data/0"), pi = zipfile_find(p, "archive/data/0");
    REQUIRE(ti == 1);
    REQUIRE(pi == 1);
    CHECK(bytes_of(z, t, ti) == "0123456789");
    CHECK(bytes_of(z, p, pi) == "0123456789");
    CHECK(torch_find(t, view(z), "archive/missing") == SIZE_MAX);
    CHECK(zip_disagreements(t, p, view(z)).empty());
}

TEST_CASE("zip readings: of two entries named data.pkl, torch and zipfile both take the second") {
    std::string z = ZipBuilder().add("data.pkl", "AAAA").add("data.pkl", "BBBB").build();
    ZipReading t = torch_of(z), p = zipfile_of(z);
    REQUIRE(t.ok());
    REQUIRE(p.ok());
    size_t ti = torch_find(t, view(z), "data.pkl");
    CHECK(ti == 1);
    CHECK(bytes_of(z, t, ti) == "BBBB");
    CHECK(zipfile_find(p, "data.pkl") == 1);
    // Both take B, but the duplicate is still named.
    std::vector<std::string> d = zip_disagreements(t, p, view(z));
    CHECK(mentions(d, "2 entries named 'data.pkl'"));
    CHECK_FALSE(mentions(d, "for torch.load and at"));
}

TEST_CASE("zip readings: with three entries and the duplicate last, torch takes the last data.pkl") {
    std::string z = ZipBuilder().add("data.pkl", "AAAA").add("other", "xx").add("data.pkl", "BBBB").build();
    ZipReading t = torch_of(z);
    REQUIRE(t.ok());
    size_t ti = torch_find(t, view(z), "data.pkl");
    CHECK(ti == 2);
    CHECK(bytes_of(z, t, ti) == "BBBB");
}

TEST_CASE("zip readings: with data.pkl first and last of four, torch takes the first and zipfile the last") {
    std::string z = ZipBuilder().add("data.pkl", "AAAA").add("x0", "0").add("x1", "1").add("data.pkl", "BBBB").build();
    ZipReading t = torch_of(z), p = zipfile_of(z);
    REQUIRE(t.ok());
    REQUIRE(p.ok());
    size_t ti = torch_find(t, view(z), "data.pkl"), pi = zipfile_find(p, "data.pkl");
    CHECK(ti == 0);
    CHECK(pi == 3);
    CHECK(bytes_of(z, t, ti) == "AAAA");
    CHECK(bytes_of(z, p, pi) == "BBBB");
    std::vector<std::string> d = zip_disagreements(t, p, view(z));
    CHECK(mentions(d, "2 entries named 'data.pkl'"));
    CHECK(line_with(d, {"'data.pkl' is the", "at byte " + std::to_string(t.members[0].local) + " for torch.load",
                        "at byte " + std::to_string(p.members[3].local) + " for Python's zipfile"}));
}

TEST_CASE("zip readings: torch's lookup ignores ASCII case, zipfile's does not") {
    std::string z = ZipBuilder().add("ARCHIVE/DATA.PKL", "UPPER").build();
    ZipReading t = torch_of(z), p = zipfile_of(z);
    REQUIRE(t.ok());
    REQUIRE(p.ok());
    size_t ti = torch_find(t, view(z), "archive/data.pkl");
    REQUIRE(ti == 0);
    CHECK(bytes_of(z, t, ti) == "UPPER");
    CHECK(zipfile_find(p, "archive/data.pkl") == SIZE_MAX);
    CHECK(zipfile_find(p, "ARCHIVE/DATA.PKL") == 0);
    CHECK(torch_root(t) == "ARCHIVE");
    // Two names that differ only in case are said to.
    std::string two = ZipBuilder().add("archive/data.pkl", "lower").add("ARCHIVE/DATA.PKL", "UPPER").build();
    ZipReading t2 = torch_of(two), p2 = zipfile_of(two);
    REQUIRE(t2.ok());
    REQUIRE(p2.ok());
    CHECK(mentions(zip_disagreements(t2, p2, view(two)), "entries whose names differ only in case"));
}

TEST_CASE("zip readings: bytes before the archive shift zipfile's offsets; torch does not open it") {
    std::string zip = ZipBuilder().add("data.pkl", "PAYLOAD").build();
    std::string file = std::string(100, 'J') + zip;
    ZipReading p = zipfile_of(file);
    REQUIRE(p.ok());
    CHECK(p.shift == 100);
    REQUIRE(p.members.size() == 1);
    CHECK(p.members[0].local == 100);
    CHECK(p.members[0].unreadable.empty());
    CHECK(bytes_of(file, p, 0) == "PAYLOAD");
    ZipReading t = torch_of(file);
    CHECK_FALSE(t.ok());
    CHECK(t.members.empty());
}

TEST_CASE("zip readings: torch reads the end record's entry count, zipfile the directory's byte size") {
    std::string z = ZipBuilder().add("a.pkl", "A").add("b.pkl", "B").build();
    size_t eocd = z.size() - 22;
    set_u16(z, eocd + 8, 1);   // entries on this disk
    set_u16(z, eocd + 10, 1);  // entries in all
    ZipReading t = torch_of(z), p = zipfile_of(z);
    REQUIRE(t.ok());
    REQUIRE(p.ok());
    CHECK(t.entries == 1);
    CHECK(t.members.size() == 1);
    CHECK(p.members.size() == 2);
    CHECK(torch_find(t, view(z), "b.pkl") == SIZE_MAX);
    CHECK(zipfile_find(p, "b.pkl") == 1);
    CHECK(mentions(zip_disagreements(t, p, view(z)), "torch.load reads 1 directory entries (the end record's count), Python's zipfile 2"));
}

TEST_CASE("zip readings: a local header whose name differs is read by torch and refused by zipfile") {
    std::string z = ZipBuilder().add("data.pkl", "PAYLOAD").build();
    REQUIRE(z.substr(30, 8) == "data.pkl");
    z.replace(30, 8, "datq.pkl");
    ZipReading t = torch_of(z), p = zipfile_of(z);
    REQUIRE(t.ok());
    REQUIRE(p.ok());
    REQUIRE(t.members.size() == 1);
    REQUIRE(p.members.size() == 1);
    CHECK(t.members[0].unreadable.empty());
    CHECK(t.members[0].local_name == "datq.pkl");
    CHECK(bytes_of(z, t, 0) == "PAYLOAD");
    CHECK(p.members[0].unreadable.find("datq.pkl") != std::string::npos);
    CHECK(mentions(zip_disagreements(t, p, view(z)), "'data.pkl': torch.load reads it, Python's zipfile refuses it"));
}

TEST_CASE("zip readings: a stored member with comp 4 and size 8 gives torch 8 bytes and zipfile 4") {
    std::string z = ZipBuilder().add("data.pkl", "ABCDEFGH").build();
    size_t cd = z.rfind("PK\x01\x02");
    REQUIRE(cd != std::string::npos);
    set_u32(z, cd + 20, 4);  // compressed size 4, uncompressed stays 8
    SECTION("a non-zero modification time: miniz's one 32-bit read of method and time lets it through") {
        set_u16(z, cd + 12, 0x6000);
        ZipReading t = torch_of(z), p = zipfile_of(z);
        REQUIRE(t.ok());
        REQUIRE(p.ok());
        CHECK(bytes_of(z, t, 0) == "ABCDEFGH");
        CHECK(bytes_of(z, p, 0) == "ABCD");
        CHECK(mentions(zip_disagreements(t, p, view(z)),
                       "'data.pkl' is stored with 4 bytes but claims 8: torch.load reads 8 bytes, Python's zipfile 4"));
    }
    SECTION("a zero time: miniz refuses the archive, zipfile reads 4 bytes") {
        ZipReading t = torch_of(z), p = zipfile_of(z);
        CHECK_FALSE(t.ok());
        CHECK(t.problem.find("sizes miniz refuses") != std::string::npos);
        REQUIRE(p.ok());
        CHECK(bytes_of(z, p, 0) == "ABCD");
    }
}

TEST_CASE("zip readings: an end signature in the last 21 bytes fails zipfile; torch takes the complete one") {
    std::string zip = ZipBuilder().add("data.pkl", "PAYLOAD").build();
    std::string file = zip + std::string("PK\x05\x06\0\0\0\0", 8);
    ZipReading p = zipfile_of(file);
    CHECK_FALSE(p.ok());
    CHECK(p.problem.find("no record after it") != std::string::npos);
    ZipReading t = torch_of(file);
    REQUIRE(t.ok());
    CHECK(t.eocd == zip.size() - 22);
    size_t ti = torch_find(t, view(file), "data.pkl");
    REQUIRE(ti == 0);
    CHECK(bytes_of(file, t, ti) == "PAYLOAD");
    // One reading alone is no disagreement to list: the caller says what a failed reading means.
    CHECK(zip_disagreements(t, p, view(file)).empty());
}

TEST_CASE("zip readings: zipfile cuts a name at a NUL, torch does not") {
    std::string z = ZipBuilder().add(std::string("data.pkl\0evil", 13), "PAYLOAD").build();
    ZipReading t = torch_of(z), p = zipfile_of(z);
    REQUIRE(t.ok());
    REQUIRE(p.ok());
    CHECK(p.members[0].name == "data.pkl");
    CHECK(p.members[0].raw_name.size() == 13);
    CHECK(zipfile_find(p, "data.pkl") == 0);
    CHECK(torch_find(t, view(z), "data.pkl") == SIZE_MAX);
    CHECK(mentions(zip_disagreements(t, p, view(z)), "a name with a NUL in it ('data.pkl"));
}

TEST_CASE("zip readings: a DEFLATE member inflates to its size, and a cap cuts it with a problem") {
    std::string payload;
    for (int i = 0; i < 200; ++i) payload += "line " + std::to_string(i) + "\n";
    std::string z = ZipBuilder().add("data.pkl", payload, true).build();
    ZipReading t = torch_of(z), p = zipfile_of(z);
    REQUIRE(t.ok());
    REQUIRE(p.ok());
    CHECK(t.members[0].method == 8);
    CHECK(bytes_of(z, t, 0) == payload);
    CHECK(bytes_of(z, p, 0) == payload);
    std::vector<uint8_t> owned;
    std::string problem;
    ByteView cut = member_bytes(view(z), t, t.members[0], 10, owned, problem);
    CHECK(std::string(cut.as_chars()) == payload.substr(0, 10));
    CHECK(problem.find("more than 10 bytes") != std::string::npos);
}
