// Protocol 0's text arguments: STRING's quoted literal (Python escapes) and UNICODE's
// raw-unicode-escape line, decoded to UTF-8. Private to the pickle VM.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ckpt::pickle_text {

// Well-formed UTF-8 (what CPython's strict decoding accepts of a name or a str).
bool valid_utf8(std::string_view s);

// false, with `error` saying why, for a malformed argument.
bool string_literal(std::string_view line, std::string& out, std::string& error);
bool raw_unicode(std::string_view line, std::string& out, std::string& error);

// _codecs.encode(text, encoding) for the encodings protocol 2 writes bytes with (latin-1, as torch
// does, and utf-8): the bytes, or false for any other encoding or a code point past 0xff.
bool codecs_encode(std::string_view text, std::string_view encoding, std::string& out);

// INT's and LONG's text, read as CPython reads it: INT first by C's strtol with base 0 ("0x1f",
// "017", leading blanks), then, as LONG always is, by Python's int(text, 0) (underscores, 0o/0b,
// blanks around, any size). `fits`: the value is `small`; otherwise `big` holds it as little-endian
// two's complement bytes, as LONG1 carries it. false for text Python refuses.
struct Integer {
    bool fits = true;
    int64_t small = 0;
    std::string big;
};
bool int_literal(std::string_view line, Integer& out);   // INT, the whole line
bool long_literal(std::string_view line, Integer& out);  // LONG, the trailing 'L' already cut
// PUT and GET's argument: decimal digits, as strtoull reads them (no sign, no overflow).
bool memo_index(std::string_view line, uint64_t& out);

}  // namespace ckpt::pickle_text
