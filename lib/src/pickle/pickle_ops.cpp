// The opcodes by protocol, with their arguments (Lib/pickletools.py has the authoritative list):
//   protocol 0/1 text:  MARK '(' · STOP '.' · POP '0' · POP_MARK '1' · DUP '2' · FLOAT 'F' line ·
//                       INT 'I' line · LONG 'L' line · STRING 'S' quoted line · UNICODE 'V' line ·
//                       NONE 'N' · APPEND 'a' · LIST 'l' · TUPLE 't' · DICT 'd' · SETITEM 's' ·
//                       GLOBAL 'c' module\nname\n · INST 'i' module\nname\n · OBJ 'o' · REDUCE 'R' ·
//                       BUILD 'b' · PUT 'p' line · GET 'g' line · PERSID 'P' line
//   protocol 1 binary:  BININT 'J' i32 · BININT1 'K' u8 · BININT2 'M' u16 · BINSTRING 'T' u32 len ·
//                       SHORT_BINSTRING 'U' u8 len · BINUNICODE 'X' u32 len · BINFLOAT 'G' f64 (big
//                       endian) · EMPTY_LIST ']' · APPENDS 'e' · EMPTY_TUPLE ')' · EMPTY_DICT '}' ·
//                       SETITEMS 'u' · BINPUT 'q' u8 · LONG_BINPUT 'r' u32 · BINGET 'h' u8 ·
//                       LONG_BINGET 'j' u32 · BINPERSID 'Q' · POP_MARK
//   protocol 2:         PROTO 0x80 u8 · NEWOBJ 0x81 · EXT1-4 0x82-0x84 · TUPLE1-3 0x85-0x87 ·
//                       NEWTRUE 0x88 · NEWFALSE 0x89 · LONG1 0x8a u8 len · LONG4 0x8b i32 len
//   protocol 3:         BINBYTES 'B' u32 len · SHORT_BINBYTES 'C' u8 len
//   protocol 4:         SHORT_BINUNICODE 0x8c u8 len · BINUNICODE8 0x8d u64 len · BINBYTES8 0x8e u64 ·
//                       EMPTY_SET 0x8f · ADDITEMS 0x90 · FROZENSET 0x91 · NEWOBJ_EX 0x92 ·
//                       STACK_GLOBAL 0x93 · MEMOIZE 0x94 · FRAME 0x95 u64
//   protocol 5:         BYTEARRAY8 0x96 u64 · NEXT_BUFFER 0x97 · READONLY_BUFFER 0x98
// Integers are little-endian. LONG1/LONG4 carry little-endian two's complement bytes.
#include "pickle/pickle_ops.hpp"

#include <algorithm>
#include <array>

namespace ckpt::pickle_ops {

namespace {

struct Row {
    uint8_t op;
    Info info;
};

constexpr Row k_rows[] = {
    {MARK, {"MARK", Arg::none, 0}}, {STOP, {"STOP", Arg::none, 0}}, {POP, {"POP", Arg::none, 0}},
    {POP_MARK, {"POP_MARK", Arg::none, 1}}, {DUP, {"DUP", Arg::none, 0}}, {FLOAT, {"FLOAT", Arg::line, 0}},
    {INT, {"INT", Arg::line, 0}}, {BININT, {"BININT", Arg::u4, 1}}, {BININT1, {"BININT1", Arg::u1, 1}},
    {LONG, {"LONG", Arg::line, 0}}, {BININT2, {"BININT2", Arg::u2, 1}}, {NONE, {"NONE", Arg::none, 0}},
    {PERSID, {"PERSID", Arg::line, 0}}, {BINPERSID, {"BINPERSID", Arg::none, 1}},
    {REDUCE, {"REDUCE", Arg::none, 0}}, {STRING, {"STRING", Arg::line, 0}},
    {BINSTRING, {"BINSTRING", Arg::slen4, 1}}, {SHORT_BINSTRING, {"SHORT_BINSTRING", Arg::len1, 1}},
    {UNICODE, {"UNICODE", Arg::line, 0}}, {BINUNICODE, {"BINUNICODE", Arg::len4, 1}},
    {APPEND, {"APPEND", Arg::none, 0}}, {BUILD, {"BUILD", Arg::none, 0}}, {GLOBAL, {"GLOBAL", Arg::two_lines, 0}},
    {DICT, {"DICT", Arg::none, 0}}, {EMPTY_DICT, {"EMPTY_DICT", Arg::none, 1}}, {APPENDS, {"APPENDS", Arg::none, 1}},
    {GET, {"GET", Arg::line, 0}}, {BINGET, {"BINGET", Arg::u1, 1}}, {INST, {"INST", Arg::two_lines, 0}},
    {LONG_BINGET, {"LONG_BINGET", Arg::u4, 1}}, {LIST, {"LIST", Arg::none, 0}},
    {EMPTY_LIST, {"EMPTY_LIST", Arg::none, 1}}, {OBJ, {"OBJ", Arg::none, 1}}, {PUT, {"PUT", Arg::line, 0}},
    {BINPUT, {"BINPUT", Arg::u1, 1}}, {LONG_BINPUT, {"LONG_BINPUT", Arg::u4, 1}},
    {SETITEM, {"SETITEM", Arg::none, 0}}, {TUPLE, {"TUPLE", Arg::none, 0}},
    {EMPTY_TUPLE, {"EMPTY_TUPLE", Arg::none, 1}}, {SETITEMS, {"SETITEMS", Arg::none, 1}},
    {BINFLOAT, {"BINFLOAT", Arg::f8, 1}}, {PROTO, {"PROTO", Arg::u1, 2}}, {NEWOBJ, {"NEWOBJ", Arg::none, 2}},
    {EXT1, {"EXT1", Arg::u1, 2}}, {EXT2, {"EXT2", Arg::u2, 2}}, {EXT4, {"EXT4", Arg::u4, 2}},
    {TUPLE1, {"TUPLE1", Arg::none, 2}}, {TUPLE2, {"TUPLE2", Arg::none, 2}}, {TUPLE3, {"TUPLE3", Arg::none, 2}},
    {NEWTRUE, {"NEWTRUE", Arg::none, 2}}, {NEWFALSE, {"NEWFALSE", Arg::none, 2}},
    {LONG1, {"LONG1", Arg::len1, 2}}, {LONG4, {"LONG4", Arg::slen4, 2}}, {BINBYTES, {"BINBYTES", Arg::len4, 3}},
    {SHORT_BINBYTES, {"SHORT_BINBYTES", Arg::len1, 3}}, {SHORT_BINUNICODE, {"SHORT_BINUNICODE", Arg::len1, 4}},
    {BINUNICODE8, {"BINUNICODE8", Arg::len8, 4}}, {BINBYTES8, {"BINBYTES8", Arg::len8, 4}},
    {EMPTY_SET, {"EMPTY_SET", Arg::none, 4}}, {ADDITEMS, {"ADDITEMS", Arg::none, 4}},
    {FROZENSET, {"FROZENSET", Arg::none, 4}}, {NEWOBJ_EX, {"NEWOBJ_EX", Arg::none, 4}},
    {STACK_GLOBAL, {"STACK_GLOBAL", Arg::none, 4}}, {MEMOIZE, {"MEMOIZE", Arg::none, 4}},
    {FRAME, {"FRAME", Arg::u8, 4}}, {BYTEARRAY8, {"BYTEARRAY8", Arg::len8, 5}},
    {NEXT_BUFFER, {"NEXT_BUFFER", Arg::none, 5}}, {READONLY_BUFFER, {"READONLY_BUFFER", Arg::none, 5}},
};

struct Table {
    std::array<const Info*, 256> by_op{};
    Table() {
        for (const Row& r : k_rows) by_op[r.op] = &r.info;
    }
};

const Table& table() {
    static const Table t;
    return t;
}

}  // namespace

const Info* info(uint8_t op) { return table().by_op[op]; }

namespace {

// span() with the opcode's Info already looked up: inlined into the walks that call it per opcode
// (memo_fetches: 2.5 million opcodes for 100,000 tensors).
inline Span span_of(ByteView pk, uint64_t pos, const Info* i) {
    if (pos >= pk.size || !i) return {};
    uint64_t at = pos + 1, left = pk.size - at;
    auto fixed = [&](uint64_t n) -> Span { return n <= left ? Span{at + n, at} : Span{}; };
    auto counted = [&](int width, bool is_signed) -> Span {
        if (left < static_cast<uint64_t>(width)) return {};
        uint64_t n = load_le(pk.data + at, width);
        if (is_signed && (n & 0x80000000u)) return {};
        if (n > left - width) return {};
        return {at + width + n, at + width};
    };
    auto line_end = [&](uint64_t from) -> uint64_t {
        for (uint64_t p = from; p < pk.size; ++p)
            if (pk.data[p] == '\n') return p + 1;
        return 0;
    };
    switch (i->arg) {
        case Arg::none: return {at, at};
        case Arg::u1: return fixed(1);
        case Arg::u2: return fixed(2);
        case Arg::u4: return fixed(4);
        case Arg::f8:
        case Arg::u8: return fixed(8);
        case Arg::len1: return counted(1, false);
        case Arg::len4: return counted(4, false);
        case Arg::slen4: return counted(4, true);
        case Arg::len8: return counted(8, false);
        case Arg::line: {
            uint64_t e = line_end(at);
            return e ? Span{e, at} : Span{};
        }
        case Arg::two_lines: {
            uint64_t e = line_end(at);
            uint64_t e2 = e ? line_end(e) : 0;
            return e2 ? Span{e2, at} : Span{};
        }
    }
    return {};
}

}  // namespace

Span span(ByteView pk, uint64_t pos) { return pos < pk.size ? span_of(pk, pos, info(pk.data[pos])) : Span{}; }

bool memo_fetches(ByteView pk, std::vector<bool>& fetched) {
    constexpr uint64_t k_max = 1u << 24;
    std::vector<bool> put;
    uint64_t count = 0;
    auto line_index = [&](const Span& sp, uint64_t& out) {
        if (sp.end - sp.payload < 2) return false;
        out = 0;
        for (uint64_t p = sp.payload; p + 1 < sp.end; ++p) {
            uint8_t d = pk.data[p];
            if (d < '0' || d > '9' || out >= k_max) return false;
            out = out * 10 + (d - '0');
        }
        return true;
    };
    const auto& by_op = table().by_op;
    for (uint64_t pos = 0; pos < pk.size;) {
        uint8_t op = pk.data[pos];
        Span sp = span_of(pk, pos, by_op[op]);
        if (!sp.end) return false;
        uint64_t index = 0;
        switch (op) {
            case STOP: return true;
            case DUP: return false;
            case BINGET: case BINPUT: index = pk.data[sp.payload]; break;
            case LONG_BINGET: case LONG_BINPUT: index = load_le(pk.data + sp.payload, 4); break;
            case GET: case PUT: if (!line_index(sp, index)) return false; break;
            case MEMOIZE: index = count; break;
            default: pos = sp.end; continue;
        }
        if (index >= k_max) return false;
        std::vector<bool>& set = op == BINGET || op == LONG_BINGET || op == GET ? fetched : put;
        if (set.size() <= index) set.resize(std::max<uint64_t>(index + 1, set.size() * 2));
        if (&set == &put && !put[index]) ++count;
        set[index] = true;
        pos = sp.end;
    }
    return false;
}

}  // namespace ckpt::pickle_ops
