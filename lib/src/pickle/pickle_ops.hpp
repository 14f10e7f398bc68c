// The pickle opcodes (Lib/pickletools.py is the authoritative list): what each is called and how its
// inline argument is encoded. The VM (pickle.cpp) runs them; this table serves the code that walks a
// pickle without running it: the scanner's disassembly and the writers that patch a pickle in place.
#pragma once

#include <cstdint>
#include <vector>

#include "ckpt/bytes.hpp"

namespace ckpt::pickle_ops {

enum class Arg : uint8_t {
    none,       // no argument
    u1,         // 1 byte (BININT1, BINPUT, BINGET, PROTO, EXT1)
    u2,         // 2 bytes (BININT2, EXT2)
    u4,         // 4 bytes (BININT, LONG_BINPUT, LONG_BINGET, EXT4)
    f8,         // 8 bytes (BINFLOAT)
    u8,         // 8 bytes (FRAME's length)
    len1,       // a 1-byte length, then that many bytes
    len4,       // a 4-byte unsigned length, then the bytes (BINUNICODE, BINBYTES)
    slen4,      // a 4-byte signed length, then the bytes (BINSTRING, LONG4)
    len8,       // an 8-byte length, then the bytes (BINUNICODE8, BINBYTES8, BYTEARRAY8)
    line,       // text up to a newline
    two_lines,  // module and name lines (GLOBAL, INST)
};

struct Info {
    const char* name;  // pickletools' name: "GLOBAL", "STACK_GLOBAL" …
    Arg arg;
    uint8_t protocol;  // the protocol that introduced it
};

// nullptr for a byte that is no opcode.
const Info* info(uint8_t op);
inline const char* name(uint8_t op) {
    const Info* i = info(op);
    return i ? i->name : "?";
}

// Where an opcode's argument lies: [arg, end) of the pickle, the payload of a counted argument
// starting at `payload`.
struct Span {
    uint64_t end = 0;      // just past the opcode and its argument; 0 when truncated or no opcode
    uint64_t payload = 0;  // start of a counted payload, a line, or the first of two lines
};
Span span(ByteView pickle, uint64_t pos);

// Length of the opcode at `pos` with its argument, 0 when it is no opcode or runs past the end.
inline uint64_t length(ByteView pickle, uint64_t pos) {
    Span s = span(pickle, pos);
    return s.end ? s.end - pos : 0;
}

// Opcodes by name, for code that emits or tests for them.
enum : uint8_t {
    MARK = '(', STOP = '.', POP = '0', POP_MARK = '1', DUP = '2', FLOAT = 'F', INT = 'I', BININT = 'J',
    BININT1 = 'K', LONG = 'L', BININT2 = 'M', NONE = 'N', PERSID = 'P', BINPERSID = 'Q', REDUCE = 'R',
    STRING = 'S', BINSTRING = 'T', SHORT_BINSTRING = 'U', UNICODE = 'V', BINUNICODE = 'X', APPEND = 'a',
    BUILD = 'b', GLOBAL = 'c', DICT = 'd', EMPTY_DICT = '}', APPENDS = 'e', GET = 'g', BINGET = 'h',
    INST = 'i', LONG_BINGET = 'j', LIST = 'l', EMPTY_LIST = ']', OBJ = 'o', PUT = 'p', BINPUT = 'q',
    LONG_BINPUT = 'r', SETITEM = 's', TUPLE = 't', EMPTY_TUPLE = ')', SETITEMS = 'u', BINFLOAT = 'G',
    PROTO = 0x80, NEWOBJ = 0x81, EXT1 = 0x82, EXT2 = 0x83, EXT4 = 0x84, TUPLE1 = 0x85, TUPLE2 = 0x86,
    TUPLE3 = 0x87, NEWTRUE = 0x88, NEWFALSE = 0x89, LONG1 = 0x8a, LONG4 = 0x8b, BINBYTES = 'B',
    SHORT_BINBYTES = 'C', SHORT_BINUNICODE = 0x8c, BINUNICODE8 = 0x8d, BINBYTES8 = 0x8e, EMPTY_SET = 0x8f,
    ADDITEMS = 0x90, FROZENSET = 0x91, NEWOBJ_EX = 0x92, STACK_GLOBAL = 0x93, MEMOIZE = 0x94, FRAME = 0x95,
    BYTEARRAY8 = 0x96, NEXT_BUFFER = 0x97, READONLY_BUFFER = 0x98,
};

// Bytes that open with PROTO of a protocol from `lowest` to 5: how every pickler since protocol 2
// starts (a scanner looks for these where it searches past junk or into bytes values).
inline bool proto_start(ByteView b, uint8_t lowest = 2) {
    return b.size >= 2 && b.data[0] == PROTO && b.data[1] >= lowest && b.data[1] <= 5;
}

// The memo indices that some GET of `pickle` reads, by a walk over its opcodes up to STOP (MEMOIZE
// numbered as the VM numbers it: the count of distinct indices memoized before it). False when the
// walk cannot tell: a DUP (a second reference the memo does not show), an opcode it cannot step
// over, an index past 2^24 or written other than in plain digits. The VM then takes every memoized
// value as fetched. Cost: a step per opcode and no values, some 3% of inspect on 100,000 tensors.
bool memo_fetches(ByteView pickle, std::vector<bool>& fetched);

}  // namespace ckpt::pickle_ops
