// Compressed wrappers around a pickle or an archive: gzip, zlib, bz2, xz, lzma, lz4, zstd and joblib's
// old "ZF" files, recognised by their first bytes and opened as the loaders that unpickle through them
// open them (joblib.load detects its compressor by magic; people pickle.load(gzip.open(…)) too).
//
//   gzip   1f 8b 08 …           members back to back, NUL padding between (Python's gzip module)
//   zlib   78 xx, (78·256+xx) % 31 == 0          one stream (joblib accepts any 0x78 first byte)
//   bz2    'B' 'Z' 'h' '1'–'9'  streams back to back
//   xz     fd 37 7a 58 5a 00    streams back to back
//   lzma   5d 00 …              lzma-alone (joblib's "lzma": 5d 00)
//   lz4    04 22 4d 18          frames back to back
//   zstd   28 b5 2f fd          frames back to back
//   ZF     'Z' 'F' + 19 bytes of hex length, padded with spaces, an optional space, then one zlib stream
// Archives nothing here opens (7z, RAR) are recognised, so that a caller can say what it did not see.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/bytes.hpp"

namespace ckpt {

enum class Wrapper { none, gzip, zlib, bz2, xz, lzma, lz4, zstd, joblib_zfile, sevenzip, rar };

// The wrapper `b` starts with, none when it starts with none of the magic numbers above.
Wrapper sniff_wrapper(ByteView b);
const char* wrapper_name(Wrapper w);
// 7z and RAR: recognised, never opened.
inline bool wrapper_opaque(Wrapper w) { return w == Wrapper::sevenzip || w == Wrapper::rar; }

struct Decompressed {
    std::vector<uint8_t> bytes;  // what was decompressed before any problem (a loader reads this far)
    bool complete = false;       // the whole input decompressed, within the cap
    bool capped = false;         // stopped at `max_out` bytes
    std::string problem;         // why not complete ("" when complete)
};

// One DEFLATE stream — raw (window_bits -15, a zip record's), zlib (15) or gzip (31) — from `in`,
// appended to `out`: up to the stream's end, `max_out` bytes out, or where the data breaks. Returns
// zlib's last code (Z_STREAM_END when the stream ended; Z_BUF_ERROR when the input ran out first)
// and how much of `in` it took. The one inflate loop of the tree (zip records, zip readings, wrappers).
struct Inflated {
    int rc = 0;
    uint64_t consumed = 0;
};
Inflated inflate_into(ByteView in, int window_bits, uint64_t max_out, std::vector<uint8_t>& out);

// Decompresses `in` (which starts with wrapper `w`) into at most `max_out` bytes. Never throws for
// broken data: what came out before the break is kept and `problem` says what broke.
Decompressed decompress(Wrapper w, ByteView in, uint64_t max_out);

}  // namespace ckpt
