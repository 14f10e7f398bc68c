// .npy headers as numpy.load reads them (scan/npy_header.hpp): the version, the length, the Python
// literal, and whether the dtype holds objects (then numpy.load(allow_pickle=True) unpickles the data).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "scan/npy_header.hpp"

using namespace ckpt;
using Objects = NpyHeader::Objects;

namespace {

// "\x93NUMPY", the version, the header length (2 bytes for 1.x, else 4), the header text, then `data`.
std::string npy(const std::string& header, int major = 1, int minor = 0, const std::string& data = "DATA") {
    std::string out = "\x93NUMPY";
    out += char(major);
    out += char(minor);
    int len_size = major == 1 ? 2 : 4;
    for (int i = 0; i < len_size; ++i) out += char((header.size() >> (8 * i)) & 0xff);
    return out + header + data;
}

std::string dict_with_descr(const std::string& descr_literal) {
    return "{'descr': " + descr_literal + ", 'fortran_order': False, 'shape': (2, 3), }\n";
}

NpyHeader read(const std::string& b) { return read_npy_header({reinterpret_cast<const uint8_t*>(b.data()), b.size()}); }

}  // namespace

TEST_CASE("npy header: versions 1.0, 2.0 and 3.0 and where the data starts") {
    std::string text = "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }" + std::string(5, ' ') + "\n";
    NpyHeader v1 = read(npy(text, 1));
    REQUIRE(v1.valid);
    CHECK(v1.data == 8 + 2 + text.size());
    CHECK(v1.objects == Objects::no);
    CHECK(v1.descr == "'<f4'");
    for (int major : {2, 3}) {
        CAPTURE(major);
        NpyHeader h = read(npy(text, major));
        REQUIRE(h.valid);
        CHECK(h.data == 8 + 4 + text.size());
    }
    // The newline plays no part: without one, or with one in the middle, the length decides.
    std::string no_newline = "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}";
    NpyHeader a = read(npy(no_newline));
    REQUIRE(a.valid);
    CHECK(a.data == 10 + no_newline.size());
    std::string early_newline = "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}\n      ";
    NpyHeader b = read(npy(early_newline));
    REQUIRE(b.valid);
    CHECK(b.data == 10 + early_newline.size());
}

TEST_CASE("npy header: versions numpy refuses are not valid") {
    std::string text = dict_with_descr("'<f4'");
    CHECK_FALSE(read(npy(text, 4, 0)).valid);
    CHECK_FALSE(read(npy(text, 1, 1)).valid);
    CHECK_FALSE(read(npy(text, 0, 0)).valid);
    CHECK(read(npy(text, 1, 0)).valid);  // the same text in 1.0 is fine
    // A length past the end of the file.
    std::string cut = npy(text, 1, 0, "");
    cut.resize(cut.size() - 5);
    CHECK_FALSE(read(cut).valid);
}

TEST_CASE("npy header: the keys must be exactly descr, fortran_order and shape, of the right kinds") {
    CHECK(read(npy("{'descr': '<f4', 'fortran_order': False, 'shape': ()}")).valid);
    CHECK_FALSE(read(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (), 'extra': 1}")).valid);
    CHECK_FALSE(read(npy("{'descr': '<f4', 'shape': ()}")).valid);
    CHECK_FALSE(read(npy("{'descr': '<f4', 'Fortran_order': False, 'shape': ()}")).valid);
    CHECK_FALSE(read(npy("{'descr': '<f4', 'fortran_order': False, 'shape': [3]}")).valid);
    CHECK_FALSE(read(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3.0,)}")).valid);
    CHECK_FALSE(read(npy("{'descr': '<f4', 'fortran_order': False, 'shape': ('3',)}")).valid);
    CHECK_FALSE(read(npy("{'descr': '<f4', 'fortran_order': 0, 'shape': (3,)}")).valid);
    CHECK_FALSE(read(npy("{'descr': '<f4', 'fortran_order': 'False', 'shape': (3,)}")).valid);
    CHECK_FALSE(read(npy("['descr', '<f4']")).valid);
}

TEST_CASE("npy header: every spelling of a dtype that holds objects is found") {
    const std::vector<std::string> spellings = {
        "'O'", "'|O'", "'<O8'", "'object'", "'object_'", "\"O\"", "'\\x4f'", "'\\117'", "'O' ''", "u'O'",
        "'i4,O'", "'(2,)O'", "'2O'", "[('a','O')]", "[('a','<i4'),('b','O')]", "('O',(2,))", "['aO']",
        "{'aO': None}", "'T'"};
    for (const std::string& d : spellings) {
        CAPTURE(d);
        NpyHeader h = read(npy(dict_with_descr(d)));
        CHECK(h.valid);
        CHECK(h.objects == Objects::yes);
    }
}

TEST_CASE("npy header: comments, line continuations and 1.0's 1L are read as numpy reads them") {
    std::string commented = "{'descr': '|O', # the dtype\n 'fortran_order': False, \\\n'shape': (1,), }\n";
    NpyHeader c = read(npy(commented));
    REQUIRE(c.valid);
    CHECK(c.objects == Objects::yes);
    CHECK(c.data == 10 + commented.size());
    NpyHeader l = read(npy("{'descr': '|O', 'fortran_order': False, 'shape': (3L, 2), }\n", 1));
    CHECK(l.valid);
    CHECK(l.objects == Objects::yes);
}

TEST_CASE("npy header: dtypes without objects, bytes and f-strings") {
    for (const char* d : {"'<f4'", "'|u1'", "[('a','<i4')]", "'V8'"}) {
        CAPTURE(d);
        NpyHeader h = read(npy(dict_with_descr(d)));
        CHECK(h.valid);
        CHECK(h.objects == Objects::no);
    }
    NpyHeader b = read(npy(dict_with_descr("b'O'")));
    CHECK(b.objects == Objects::no);
    CHECK_FALSE(read(npy(dict_with_descr("f'O'"))).valid);
    // A character by its Unicode name: not decided here, so maybe.
    NpyHeader n = read(npy(dict_with_descr("'\\N{LATIN CAPITAL LETTER O}'")));
    CHECK(n.valid);
    CHECK(n.objects == Objects::maybe);
}
