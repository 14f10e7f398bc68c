// Bytes read the way each loader reads them (scan/blob_scan.hpp), through the public scan_bytes:
// joblib's inline arrays, TransformerEngine's pickled extra state, torch.load's legacy tar, wrappers,
// and a file that is two formats at once.
#include <catch2/catch.hpp>

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "ckpt/scan.hpp"
#include "support/builders.hpp"

using namespace ckpt;
using testing::PickleBuilder;
using testing::ZipBuilder;

namespace {

ScanReport scan(const std::string& bytes) {
    return scan_bytes({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, "f");
}

std::string os_system() {
    return PickleBuilder().proto(2).global("os", "system").mark().str("true").tuple().reduce().stop().bytes();
}

const ScanFinding* finding(const ScanReport& r, const std::string& what) {
    auto f = std::find_if(r.findings.begin(), r.findings.end(), [&](const ScanFinding& x) { return x.global == what || x.kind == what; });
    return f == r.findings.end() ? nullptr : &*f;
}

// joblib's NumpyArrayWrapper for a 1-d array of `count` items of dtype `code` (numpy.dtype's reduce and
// BUILD state as numpy pickles it), BUILD with its state dict left for the caller to follow with the
// array's bytes. Built on `p`, after a '}' and a key the caller pushed.
void array_wrapper(PickleBuilder& p, const std::string& code, int64_t count, bool objects) {
    p.global("joblib.numpy_pickle", "NumpyArrayWrapper").empty_tuple().op('\x81');  // NEWOBJ
    p.empty_dict().mark();
    p.short_str("subclass").global("numpy", "ndarray");
    p.short_str("shape").mark().integer(count).tuple();
    p.short_str("order").short_str("C");
    p.short_str("dtype").global("numpy", "dtype").mark().short_str(code).newfalse().op('\x88').tuple().reduce();
    p.mark().integer(3).short_str(objects ? "|" : "<").op('N').op('N').op('N').integer(-1).integer(-1).integer(objects ? 63 : 0).tuple();
    p.op('b');  // the dtype's BUILD
    p.short_str("allow_mmap").newfalse();
    p.short_str("numpy_array_alignment_bytes").integer(16);
    p.setitems().op('b');  // the wrapper's BUILD: joblib reads the array right after it
}

// The rest of the outer pickle after the array: the wrapper stored, then a call that must still be judged.
std::string after_array() {
    return PickleBuilder().setitem().short_str("later").global("os", "system").mark().str("echo").tuple().reduce().setitem().stop().bytes();
}

std::string gzip_of(const std::string& in) { return ZipBuilder::deflate_raw(in, 16 + MAX_WBITS); }

// A ustar header (sealed with its checksum) and data padded to 512-byte blocks.
std::string tar_header(const std::string& name, uint64_t size) {
    std::string h(512, '\0');
    h.replace(0, std::min<size_t>(name.size(), 100), name.substr(0, 100));
    h.replace(100, 7, "0000644");
    char num[16];
    std::snprintf(num, sizeof num, "%011llo", static_cast<unsigned long long>(size));
    h.replace(124, 11, num);
    h.replace(136, 11, "14712345670");
    h[156] = '0';
    h.replace(257, 6, std::string("ustar\0", 6));
    h.replace(263, 2, "00");
    unsigned sum = 8 * ' ';
    for (size_t i = 0; i < 512; ++i)
        if (i < 148 || i >= 156) sum += static_cast<uint8_t>(h[i]);
    std::snprintf(num, sizeof num, "%06o", sum);
    h.replace(148, 8, std::string(num, 6) + std::string("\0 ", 2));
    return h;
}
std::string tar_member(const std::string& name, const std::string& data) {
    return tar_header(name, data.size()) + data + std::string((512 - data.size() % 512) % 512, '\0');
}
std::string tar_end() { return std::string(1024, '\0'); }

}  // namespace

TEST_CASE("blob scan: joblib's array bytes after a NumpyArrayWrapper are stepped over, the rest still judged") {
    PickleBuilder p;
    p.proto(4).empty_dict().short_str("arr");
    array_wrapper(p, "i2", 3, false);
    std::string b = p.bytes();
    // joblib: one byte saying how much padding, the padding (0xff), then the array's raw bytes.
    size_t pos_after_byte = b.size() + 1;
    int padding = 16 - int(pos_after_byte % 16);
    b += char(padding);
    b += std::string(size_t(padding), '\xff');
    b += std::string("\xff\xfe\x2e\x00\x01\x00", 6);  // int16 [-257, 46, 1]: no opcodes
    b += after_array();
    ScanReport r = scan(b);
    CHECK(finding(r, "malformed_pickle") == nullptr);
    const ScanFinding* f = finding(r, "os.system");
    REQUIRE(f);
    CHECK(f->severity == GlobalClass::dangerous);
    CHECK(f->offset == b.size() - after_array().size() + 8);  // SETITEM, 'later', then the GLOBAL
    CHECK(finding(r, "joblib.numpy_pickle.NumpyArrayWrapper") == nullptr);
}

TEST_CASE("blob scan: joblib's object array after a NumpyArrayWrapper is a pickle, and it is judged") {
    PickleBuilder p;
    p.proto(4).empty_dict().short_str("arr");
    array_wrapper(p, "O8", 1, true);
    std::string outer_head = p.bytes();
    // The rest of the outer pickle calls nothing: what is found is the nested pickle's.
    std::string b = outer_head + os_system() + PickleBuilder().setitem().stop().bytes();
    ScanReport r = scan(b);
    CHECK(finding(r, "malformed_pickle") == nullptr);
    // Judged as the pickle joblib hands to pickle.load (the file read by pickle.load alone, the
    // array's bytes taken as opcodes, is another reading and may find it too).
    auto f = std::find_if(r.findings.begin(), r.findings.end(), [](const ScanFinding& x) {
        return x.global == "os.system" && x.record.find("NumpyArrayWrapper") != std::string::npos;
    });
    REQUIRE(f != r.findings.end());
    CHECK(f->severity == GlobalClass::dangerous);
    CHECK(f->offset == outer_head.size() + 2);  // the nested pickle's GLOBAL, past its PROTO
}

TEST_CASE("blob scan: a pickle in the bytes of a torch zip's _extra_state tensor is judged") {
    std::string payload = os_system();
    int64_t n = int64_t(payload.size());
    PickleBuilder p;
    p.proto(2).global("collections", "OrderedDict").empty_tuple().reduce().mark();
    p.str("layer._extra_state").tensor("ByteStorage", "0", n, 0, {n}, {1});
    p.setitems().stop();
    ScanReport r = scan(testing::torch_zip("archive", p.bytes(), {{"0", payload}}));
    CHECK(r.format == "torch-zip");
    const ScanFinding* f = finding(r, "os.system");
    REQUIRE(f);
    CHECK(f->severity == GlobalClass::dangerous);
    CHECK(f->record.find("layer._extra_state") != std::string::npos);
    // The same bytes in a storage no _extra_state key names are raw tensor bytes, never unpickled.
    PickleBuilder q;
    q.proto(2).global("collections", "OrderedDict").empty_tuple().reduce().mark();
    q.str("layer.weight").tensor("ByteStorage", "0", n, 0, {n}, {1});
    q.setitems().stop();
    CHECK(scan(testing::torch_zip("archive", q.bytes(), {{"0", payload}})).clean());
}

TEST_CASE("blob scan: torch.load's legacy tar layout: the pickle member is judged") {
    std::string count0 = PickleBuilder().proto(2).integer(0).stop().bytes();
    std::string t = tar_member("storages", count0) + tar_member("tensors", count0) + tar_member("pickle", os_system()) + tar_end();
    ScanReport r = scan(t);
    CHECK(r.format == "tar");
    const ScanFinding* f = finding(r, "os.system");
    REQUIRE(f);
    CHECK(f->severity == GlobalClass::dangerous);
    CHECK(f->record == "pickle");
    CHECK(f->offset == 5 * 512 + 2);  // the member's data (after 2 headers, 2 data blocks, its header), past PROTO
}

TEST_CASE("blob scan: a gzip-wrapped pickle is opened and judged") {
    ScanReport r = scan(gzip_of(os_system()));
    CHECK(r.format == "gzip");
    const ScanFinding* f = finding(r, "os.system");
    REQUIRE(f);
    CHECK(f->severity == GlobalClass::dangerous);
}

TEST_CASE("blob scan: a file that is both a pickle that imports and a tar is a polyglot") {
    // The tar's first header's name field is the pickle; the tar holds one empty member.
    std::string pickle = os_system();
    REQUIRE(pickle.size() < 100);
    std::string t = tar_header(pickle, 0) + tar_end();
    REQUIRE(t.compare(0, pickle.size(), pickle) == 0);
    ScanReport r = scan(t);
    const ScanFinding* poly = finding(r, "polyglot");
    REQUIRE(poly);
    CHECK(poly->severity == GlobalClass::dangerous);
    CHECK(poly->message.find("a tar") != std::string::npos);
    CHECK(poly->message.find("a pickle that imports") != std::string::npos);
    CHECK(finding(r, "os.system") != nullptr);
    // The same tar under a plain name is no polyglot.
    CHECK(finding(scan(tar_member("pickle", os_system()) + tar_end()), "polyglot") == nullptr);
}
