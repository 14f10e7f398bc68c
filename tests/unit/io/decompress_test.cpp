// Compressed wrappers (io/decompress.hpp): each compressed here with its own library, then opened.
#include <catch2/catch.hpp>

#include <bzlib.h>
#include <lz4frame.h>
#include <lzma.h>
#include <zlib.h>
#include <zstd.h>

#include <string>
#include <vector>

#include "io/decompress.hpp"

using namespace ckpt;

namespace {

ByteView view(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }
std::string text(const Decompressed& d) { return std::string(d.bytes.begin(), d.bytes.end()); }

// ~300 KB of text that compresses a few times over: more than one output buffer, several bz2 blocks.
const std::string& payload() {
    static const std::string p = [] {
        std::string s;
        for (int i = 0; i < 15000; ++i) s += "row " + std::to_string(i) + " value " + std::to_string(i * 7919 % 10007) + "\n";
        return s;
    }();
    return p;
}

std::string zlib_of(const std::string& in) {
    uLongf n = compressBound(uLong(in.size()));
    std::string out(n, '\0');
    REQUIRE(compress2(reinterpret_cast<Bytef*>(out.data()), &n, reinterpret_cast<const Bytef*>(in.data()), uLong(in.size()), 6) == Z_OK);
    out.resize(n);
    return out;
}

std::string gzip_of(const std::string& in) {
    z_stream zs{};
    REQUIRE(deflateInit2(&zs, 6, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY) == Z_OK);
    std::string out(deflateBound(&zs, uLong(in.size())) + 32, '\0');
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    zs.avail_in = uInt(in.size());
    zs.next_out = reinterpret_cast<Bytef*>(out.data());
    zs.avail_out = uInt(out.size());
    REQUIRE(deflate(&zs, Z_FINISH) == Z_STREAM_END);
    out.resize(zs.total_out);
    deflateEnd(&zs);
    return out;
}

std::string bz2_of(const std::string& in) {
    unsigned n = unsigned(in.size() + in.size() / 100 + 600);
    std::string out(n, '\0');
    // 100k blocks: a cut stream still holds whole blocks before the cut.
    REQUIRE(BZ2_bzBuffToBuffCompress(out.data(), &n, const_cast<char*>(in.data()), unsigned(in.size()), 1, 0, 0) == BZ_OK);
    out.resize(n);
    return out;
}

std::string xz_of(const std::string& in) {
    std::string out(lzma_stream_buffer_bound(in.size()), '\0');
    size_t pos = 0;
    REQUIRE(lzma_easy_buffer_encode(6, LZMA_CHECK_CRC64, nullptr, reinterpret_cast<const uint8_t*>(in.data()), in.size(),
                                    reinterpret_cast<uint8_t*>(out.data()), &pos, out.size()) == LZMA_OK);
    out.resize(pos);
    return out;
}

std::string lzma_alone_of(const std::string& in) {
    lzma_options_lzma opt;
    REQUIRE_FALSE(lzma_lzma_preset(&opt, 6));
    lzma_stream s = LZMA_STREAM_INIT;
    REQUIRE(lzma_alone_encoder(&s, &opt) == LZMA_OK);
    std::string out(in.size() + in.size() / 2 + 4096, '\0');
    s.next_in = reinterpret_cast<const uint8_t*>(in.data());
    s.avail_in = in.size();
    s.next_out = reinterpret_cast<uint8_t*>(out.data());
    s.avail_out = out.size();
    lzma_ret rc = LZMA_OK;
    while (rc == LZMA_OK) rc = lzma_code(&s, LZMA_FINISH);
    REQUIRE(rc == LZMA_STREAM_END);
    out.resize(s.total_out);
    lzma_end(&s);
    return out;
}

std::string lz4_of(const std::string& in) {
    std::string out(LZ4F_compressFrameBound(in.size(), nullptr), '\0');
    size_t n = LZ4F_compressFrame(out.data(), out.size(), in.data(), in.size(), nullptr);
    REQUIRE_FALSE(LZ4F_isError(n));
    out.resize(n);
    return out;
}

std::string zstd_of(const std::string& in) {
    std::string out(ZSTD_compressBound(in.size()), '\0');
    size_t n = ZSTD_compress(out.data(), out.size(), in.data(), in.size(), 3);
    REQUIRE_FALSE(ZSTD_isError(n));
    out.resize(n);
    return out;
}

// joblib < 0.10's zlib files: "ZF", hex(len) left-justified in 19 characters, the zlib stream.
std::string zfile_of(const std::string& in, bool extra_space) {
    char hex[32];
    std::snprintf(hex, sizeof hex, "0x%zx", in.size());
    std::string len = hex;
    len.resize(19, ' ');
    return "ZF" + len + (extra_space ? " " : "") + zlib_of(in);
}

struct Case {
    const char* name;
    Wrapper wrapper;
    std::string (*make)(const std::string&);
};
const std::vector<Case>& cases() {
    static const std::vector<Case> c = {{"gzip", Wrapper::gzip, gzip_of},  {"zlib", Wrapper::zlib, zlib_of},
                                        {"bz2", Wrapper::bz2, bz2_of},     {"xz", Wrapper::xz, xz_of},
                                        {"lzma", Wrapper::lzma, lzma_alone_of}, {"lz4", Wrapper::lz4, lz4_of},
                                        {"zstd", Wrapper::zstd, zstd_of}};
    return c;
}

}  // namespace

TEST_CASE("decompress: each wrapper is known by its magic") {
    for (const Case& c : cases()) {
        CAPTURE(c.name);
        CHECK(sniff_wrapper(view(c.make("hello"))) == c.wrapper);
    }
    CHECK(sniff_wrapper(view(zfile_of("hello", false))) == Wrapper::joblib_zfile);
    CHECK(sniff_wrapper(view(std::string("7z\xbc\xaf\x27\x1c\x00\x04", 8))) == Wrapper::sevenzip);
    CHECK(sniff_wrapper(view(std::string("Rar!\x1a\x07\x01\x00", 8))) == Wrapper::rar);
    CHECK(sniff_wrapper(view(std::string("\x80\x02]q\x00.", 6))) == Wrapper::none);
    CHECK(sniff_wrapper(view(std::string("PK\x03\x04", 4))) == Wrapper::none);
    CHECK(sniff_wrapper(view(std::string("\x78\x00", 2))) == Wrapper::none);  // 0x7800 % 31 != 0
    CHECK(std::string(wrapper_name(Wrapper::gzip)) == "gzip");
    CHECK(std::string(wrapper_name(Wrapper::joblib_zfile)) == "joblib-zf");
}

TEST_CASE("decompress: every wrapper gives its payload back whole") {
    for (const Case& c : cases()) {
        CAPTURE(c.name);
        std::string packed = c.make(payload());
        REQUIRE(packed.size() < payload().size());
        Decompressed d = decompress(c.wrapper, view(packed), 64u << 20);
        CHECK(d.complete);
        CHECK_FALSE(d.capped);
        CHECK(d.problem.empty());
        CHECK(d.bytes.size() == payload().size());
        CHECK(text(d) == payload());
    }
}

TEST_CASE("decompress: two gzip members back to back are one stream, NUL padding between them too") {
    std::string a = "first member\n", b = "second member\n";
    Decompressed d = decompress(Wrapper::gzip, view(gzip_of(a) + gzip_of(b)), 1 << 20);
    CHECK(d.complete);
    CHECK(text(d) == a + b);
    Decompressed padded = decompress(Wrapper::gzip, view(gzip_of(a) + std::string(3, '\0') + gzip_of(b)), 1 << 20);
    CHECK(padded.complete);
    CHECK(text(padded) == a + b);
}

TEST_CASE("decompress: a cut stream gives what came before the cut, not complete, with a problem") {
    for (const Case& c : cases()) {
        CAPTURE(c.name);
        std::string packed = c.make(payload());
        packed.resize(packed.size() / 2);
        Decompressed d = decompress(c.wrapper, view(packed), 64u << 20);
        CHECK_FALSE(d.complete);
        CHECK_FALSE(d.capped);
        CHECK_FALSE(d.problem.empty());
        CHECK_FALSE(d.bytes.empty());
        CHECK(d.bytes.size() < payload().size());
        CHECK(payload().compare(0, d.bytes.size(), text(d)) == 0);
    }
}

TEST_CASE("decompress: the cap stops the output at max_out") {
    for (const Case& c : cases()) {
        CAPTURE(c.name);
        Decompressed d = decompress(c.wrapper, view(c.make(payload())), 1000);
        CHECK(d.capped);
        CHECK_FALSE(d.complete);
        CHECK(d.bytes.size() == 1000);
        CHECK(text(d) == payload().substr(0, 1000));
        CHECK(d.problem.find("more than 1000 bytes") != std::string::npos);
    }
}

TEST_CASE("decompress: joblib's ZF header, with and without its extra space, then a zlib stream") {
    for (bool space : {false, true}) {
        CAPTURE(space);
        std::string f = zfile_of(payload(), space);
        REQUIRE(sniff_wrapper(view(f)) == Wrapper::joblib_zfile);
        Decompressed d = decompress(Wrapper::joblib_zfile, view(f), 64u << 20);
        CHECK(d.complete);
        CHECK(text(d) == payload());
    }
}

TEST_CASE("decompress: 7z and RAR are recognised and never opened") {
    CHECK(wrapper_opaque(Wrapper::sevenzip));
    CHECK(wrapper_opaque(Wrapper::rar));
    CHECK_FALSE(wrapper_opaque(Wrapper::gzip));
    CHECK_FALSE(wrapper_opaque(Wrapper::none));
    std::string sz("7z\xbc\xaf\x27\x1c\x00\x04", 8);
    Decompressed d = decompress(Wrapper::sevenzip, view(sz), 1 << 20);
    CHECK_FALSE(d.complete);
    CHECK(d.bytes.empty());
    CHECK_FALSE(d.problem.empty());
}

TEST_CASE("decompress: an lzma header that asks for a 2 GiB dictionary is refused, and says so (fuzz/crashes/scan-lzma-dictionary-2gib)") {
    // lzma-alone: properties 0x5d, dictionary size 0x80400000 (2 GiB), unknown size, then some bytes.
    const uint8_t header[] = {0x5d, 0x00, 0x00, 0x40, 0x80, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x40, 0x00, 0x88, 0x03};
    Decompressed d = decompress(Wrapper::lzma, {header, sizeof header}, 1u << 20);
    CHECK_FALSE(d.complete);
    CHECK(d.capped);  // a limit of scan's: what lies inside is not seen (scan makes that a finding)
    CHECK(d.problem.find("dictionary") != std::string::npos);
}
