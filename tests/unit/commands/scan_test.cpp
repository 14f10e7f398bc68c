// scan at the level of a file: which bytes are read as pickles, and how the report says it.
#include <catch2/catch.hpp>

#include <algorithm>

#include "ckpt/error.hpp"
#include "ckpt/scan.hpp"
#include "scan/scan_hooks.hpp"
#include "support/builders.hpp"

using namespace ckpt;
using testing::PickleBuilder;
using testing::ZipBuilder;

namespace {

ScanReport scan(const std::string& bytes, const ScanOptions& o = {}) {
    return scan_bytes({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, "f", o);
}

std::string os_system() {
    PickleBuilder p;
    p.proto(2).global("os", "system").mark().str("true").tuple().reduce().stop();
    return p.bytes();
}

bool has(const ScanReport& r, const std::string& what) {
    return std::any_of(r.findings.begin(), r.findings.end(), [&](const ScanFinding& f) { return f.global == what || f.kind == what; });
}

bool noted(const ScanReport& r, const std::string& kind) {
    return std::any_of(r.notes.begin(), r.notes.end(), [&](const ScanNote& n) { return n.kind == kind; });
}

}  // namespace

TEST_CASE("scan: a torch zip: data.pkl judged, storages never read as pickles") {
    PickleBuilder p;
    p.proto(2).global("collections", "OrderedDict").empty_tuple().reduce().stop();
    // A storage record holding a pickle: torch never unpickles it, and neither does the scan.
    ScanReport r = scan(testing::torch_zip("ck", p.bytes(), {{"0", os_system()}}));
    CHECK(r.format == "torch-zip");
    CHECK(r.clean());
    REQUIRE(r.pickles.size() == 1);
    CHECK(r.pickles[0].record == "ck/data.pkl");
    // The same pickle under another member name is read.
    ScanReport x = scan(ZipBuilder().add("ck/data.pkl", p.bytes()).add("ck/extra/hook", os_system()).build());
    CHECK(has(x, "os.system"));
    CHECK(x.findings[0].record == "ck/extra/hook");
}

TEST_CASE("scan: the offset of a finding is the opcode's byte in the file") {
    std::string first = PickleBuilder().proto(2).empty_list().stop().bytes();
    ScanReport r = scan(first + os_system());
    REQUIRE(r.pickles.size() == 2);
    CHECK(r.pickles[1].offset == first.size());
    REQUIRE(has(r, "os.system"));
    CHECK(r.findings[0].offset == first.size() + 2);  // right after the second PROTO
    CHECK(r.findings[0].opcode == "GLOBAL");
    CHECK(r.findings[0].record == "pickle (pickle 2)");
}

TEST_CASE("scan: bytes after the last pickle are a note; a pickle past junk is scanned") {
    std::string clean = PickleBuilder().proto(2).empty_list().stop().bytes();
    ScanReport a = scan(clean + "\n\n\t\t");
    CHECK(a.clean());
    CHECK(noted(a, "trailing_bytes"));
    ScanReport b = scan(clean + std::string("\x00\x00junk", 6) + os_system());
    CHECK(has(b, "os.system"));
}

TEST_CASE("scan: what is no pickle is a note, and a file scan does not know is an error") {
    ScanReport r = scan("cmod\n\xf8\n");
    CHECK(r.clean());
    CHECK(noted(r, "not_a_pickle"));
    CHECK(r.pickles.empty());
    CHECK_THROWS_AS(scan(""), Error);
    CHECK_THROWS_AS(scan("\x89PNG\r\n\x1a\n...."), Error);
    CHECK_THROWS_AS(scan("{\"json\": 1}"), Error);
}

TEST_CASE("scan: .npy data is a pickle only for an object dtype") {
    auto npy = [](const std::string& descr, const std::string& data) {
        std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (1,), }";
        header += std::string((64 - (10 + header.size() + 1) % 64) % 64, ' ') + "\n";
        std::string out = "\x93NUMPY\x01";
        out += '\0';
        out += char(header.size() & 0xff);
        out += char(header.size() >> 8);
        return out + header + data;
    };
    ScanReport obj = scan(npy("|O", os_system()));
    CHECK(obj.format == "npy");
    CHECK(has(obj, "os.system"));
    ScanReport ints = scan(npy("<i8", std::string(8, '\x01')));
    CHECK(ints.clean());
    CHECK(ints.pickles.empty());
}

TEST_CASE("scan: zip members torch reads through its quirks; what is encrypted is never clean") {
    std::string z = ZipBuilder().add("data.pkl", os_system()).build();
    // The encryption bit on a plain member (local header at 0, central directory record after the data).
    std::string flagged = z;
    flagged[6] |= 1;
    size_t cd = flagged.rfind("PK\x01\x02");
    flagged[cd + 8] |= 1;
    CHECK(has(scan(flagged), "os.system"));
    // A local header name that differs from the directory's.
    std::string renamed = z;
    renamed.replace(30, 8, "datap.kl");
    CHECK(has(scan(renamed), "os.system"));
    // A real encryption header (12 bytes more than the plain size): not read, noted.
    ZipBuilder e;
    e.add("secret.pkl", std::string(12, '\x55') + "abc");
    std::string enc = e.build();
    enc[6] |= 1;
    cd = enc.rfind("PK\x01\x02");
    enc[cd + 8] |= 1;
    // Sizes: compressed 15, plain 3 (what an encrypting writer records).
    size_t local_plain = 22, central_plain = cd + 24;
    enc[local_plain] = 3;
    enc[central_plain] = 3;
    // Nothing readable at all: no loader reads it without the password, and neither can scan.
    CHECK_THROWS_AS(scan(enc), Error);
    // Beside a plain member, the encrypted one is a finding: what it holds is not seen.
    ZipBuilder mixed;
    mixed.add("config.json", "{}");
    mixed.add("secret.pkl", std::string(12, '\x55') + "abc");
    std::string m = mixed.build();
    size_t lh = m.find("PK\x03\x04", 1), ch = m.rfind("PK\x01\x02");
    m[lh + 6] |= 1;
    m[ch + 8] |= 1;
    m[lh + 22] = 3;
    m[ch + 24] = 3;
    ScanReport r = scan(m);
    REQUIRE(r.findings.size() == 1);
    CHECK(r.findings[0].kind == "opaque_wrapper");
    CHECK(r.findings[0].severity == GlobalClass::unknown);
    CHECK(r.findings[0].message.find("'secret.pkl' is encrypted") != std::string::npos);
}

TEST_CASE("scan: findings of one kind on one global come once, counted") {
    PickleBuilder p;
    p.proto(2).global("argparse", "Namespace").binput(0);
    for (int i = 0; i < 5; ++i) p.empty_dict().op('b');
    p.stop();
    ScanReport r = scan(p.bytes());
    REQUIRE(r.findings.size() == 1);
    CHECK(r.findings[0].kind == "mutates_global");
    CHECK(r.findings[0].message.find("4 more times") != std::string::npos);
}

TEST_CASE("scan: the text decoders") {
    std::string out;
    CHECK(decode_hex("80025d2e", out));
    CHECK(out == std::string("\x80\x02]."));
    CHECK_FALSE(decode_hex("802", out));
    CHECK_FALSE(decode_hex("80zz", out));
    CHECK(decode_hex("80 02\n5d", out, true));
    CHECK(out == std::string("\x80\x02]"));
    CHECK(decode_base64("gAJdLg==", out));
    CHECK(out == std::string("\x80\x02]."));
    CHECK(decode_base64("gAJ\ndLg==", out));  // Python's b64decode skips what is not in the alphabet
    CHECK(out == std::string("\x80\x02]."));
    CHECK(decode_base64("-_8=", out, true));
    CHECK(out == std::string("\xfb\xff"));
    CHECK_FALSE(decode_base64("gA==AA", out));  // data after the padding
}

TEST_CASE("scan: the policy of the options judges, and --allow shows its rule") {
    PickleBuilder p;
    p.proto(2).global("mylib", "Net").empty_tuple().reduce().stop();
    ScanReport r = scan(p.bytes());
    REQUIRE(r.findings.size() == 1);
    CHECK(r.findings[0].severity == GlobalClass::unknown);
    GlobalPolicy policy;
    policy.allow("mylib.*", "--allow");
    ScanOptions o;
    o.policy = &policy;
    ScanReport a = scan(p.bytes(), o);
    CHECK(a.clean());
    REQUIRE(a.globals.size() == 1);
    CHECK(a.globals[0].cls == GlobalClass::allowed);
    CHECK(a.globals[0].rule == "--allow mylib.*");
}

TEST_CASE("scan: past a fault, the disassembly still names what a STACK_GLOBAL takes") {
    // A FRAME longer than the rest (CPython: "pickle data was truncated" at once), then nt.system by
    // STACK_GLOBAL of two memoized strings.
    std::string b = std::string("\x80\x04\x95\x14\x00\x00\x00\x00\x00\x00\x00", 11) + "\x8c\x02nt\x94\x8c\x06system\x94\x93\x94.";
    ScanReport r = scan(b);
    CHECK(has(r, "malformed_pickle"));
    REQUIRE(has(r, "nt.system"));
    auto f = std::find_if(r.findings.begin(), r.findings.end(), [](const ScanFinding& x) { return x.global == "nt.system"; });
    CHECK(f->opcode == "STACK_GLOBAL");
    CHECK(f->message.find("past the point where the pickle breaks") != std::string::npos);
    // Strings that something else consumed in between name nothing: the STACK_GLOBAL stays unknown.
    std::string c = std::string("\x80\x04\x95\x14\x00\x00\x00\x00\x00\x00\x00", 11) + "\x8c\x02nt\x8c\x06system\x86\x93.";
    CHECK(has(scan(c), "computed_global"));
}
