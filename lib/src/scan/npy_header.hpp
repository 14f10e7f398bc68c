// An .npy header as numpy.load reads it (numpy/lib/format.py, 1.24 and 2.x): magic "\x93NUMPY", a
// version of (1,0), (2,0) or (3,0), a header length of 2 bytes (1.0) or 4, then that many bytes of a
// Python literal (latin-1, UTF-8 for 3.0) that ast.literal_eval reads — any quoting, escapes,
// implicit concatenation, comments, Python 2's `1L` in versions 1.0 and 2.0 — which must be a dict of
// exactly `descr`, `fortran_order` and `shape`. The array data, or for a dtype that holds objects
// the pickle numpy.load(allow_pickle=True) unpickles, starts right after those bytes (the newline at
// the header's end plays no part).
#pragma once

#include <cstdint>
#include <string>

#include "ckpt/bytes.hpp"

namespace ckpt {

struct NpyHeader {
    enum class Objects { no, yes, maybe };
    bool valid = false;    // numpy reads the header (version, length, literal, keys)
    std::string problem;   // why not, when not
    uint64_t data = 0;     // where the data starts
    Objects objects = Objects::no;  // yes: numpy unpickles the data; maybe: a spelling not decided here
    std::string descr;     // the descr as written, for reports
};

// `b` starts with "\x93NUMPY".
NpyHeader read_npy_header(ByteView b);

}  // namespace ckpt
