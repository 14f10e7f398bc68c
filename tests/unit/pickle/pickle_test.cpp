#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "ckpt/error.hpp"
#include "pickle/pickle.hpp"
#include "support/builders.hpp"

using namespace ckpt;
using testing::PickleBuilder;

namespace {

struct Run {
    ValueArena arena;
    PickleHooks hooks;
    Value* root = nullptr;
    explicit Run(const std::string& bytes, PickleLimits limits = {}) {
        ByteView v{reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()};
        root = run_pickle(v, arena, hooks, "test.pkl", 0, limits).root;
    }
};

std::string repr_of(const std::string& bytes) {
    Run r(bytes);
    return repr(r.root, 1000);
}

ErrorKind error_of(const std::string& bytes, std::string* message = nullptr, PickleLimits limits = {}) {
    try {
        Run r(bytes, limits);
    } catch (const Error& e) {
        if (message) *message = e.what();
        return e.kind();
    }
    FAIL("no error");
    return ErrorKind::io;
}

}  // namespace

TEST_CASE("pickle: protocol 2 scalars and containers") {
    PickleBuilder p;
    p.proto(2).empty_dict().binput(0).mark();
    p.str("a").integer(1);
    p.str("b").integer(-5);
    p.str("c").integer(1ll << 40);
    p.str("d").op('G').raw(std::string("\x3f\xb9\x99\x99\x99\x99\x99\x9a", 8));  // 0.1
    p.str("e").op('N');
    p.str("f").op('\x88');
    p.str("g").mark().integer(1).integer(2).tuple();
    p.str("h").empty_list().mark().integer(3).short_str("x").op('e');
    p.str("i").op('C').raw(std::string("\x03", 1)).raw(std::string("a\x00\xff", 3));
    p.str("j").op('\x8a').raw(std::string("\x0d", 1)).raw(std::string("\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x10", 13));
    p.setitems().stop();
    CHECK(repr_of(p.bytes()) ==
          "{'a': 1, 'b': -5, 'c': 1099511627776, 'd': 0.1, 'e': None, 'f': True, 'g': (1, 2), "
          "'h': [3, 'x'], 'i': b'a\\x00\\xff', 'j': 1267650600228229401496703205376}");
}

TEST_CASE("pickle: memo, DUP, POP and the mark stack") {
    PickleBuilder p;
    p.proto(2).mark().str("shared").binput(1).binget(1).op('2').op('0').tuple().stop();
    Run r(p.bytes());
    REQUIRE(r.root->items().size() == 2);
    CHECK(r.root->items()[0] == r.root->items()[1]);  // the memo gives the same object back
}

TEST_CASE("pickle: the memo keeps what a GET fetches and counts every put") {
    // Only entries some GET fetches are kept; MEMOIZE still numbers by every distinct entry, a
    // re-put of an index is not a new entry, and the cap counts the entries never fetched.
    PickleBuilder p;
    p.proto(4).mark();
    for (int i = 0; i < 300; ++i) p.integer(i).op('\x94');  // entries 0 … 299
    p.binget(7).binget(255);
    p.short_str("last").op('\x94');                          // entry 300
    p.op('j').raw(std::string("\x2c\x01\0\0", 4));         // LONG_BINGET 300
    p.binput(7).binget(7);                                   // entry 7 again: 'last'
    p.tuple().stop();
    std::string bytes = p.bytes();
    Run r(bytes);
    REQUIRE(r.root->items().size() == 305);
    CHECK(r.root->items()[300] == r.root->items()[7]);
    CHECK(r.root->items()[301] == r.root->items()[255]);
    CHECK(repr(r.root->items()[255], 10) == "255");
    CHECK(r.root->items()[302] == r.root->items()[303]);
    CHECK(r.root->items()[304] == r.root->items()[302]);
    CHECK(repr(r.root->items()[304], 10) == "'last'");
    PickleLimits limits;
    limits.max_memo = 301;  // entries 0 … 300: the re-put of 7 is not one more
    CHECK(Run(bytes, limits).root->items().size() == 305);
    limits.max_memo = 300;
    CHECK(error_of(bytes, nullptr, limits) == ErrorKind::limit);
}

TEST_CASE("pickle: a key set again keeps its first position, in small dicts and large ones") {
    // Python's dict: 1 == 1.0 == True and 'a' == 'a'; the value is the last one set. A dict of up to
    // eight keys is searched in place, a larger one through an index made when it grows past that.
    auto dict_of = [](int keys) {
        PickleBuilder p;
        p.proto(2).empty_dict().mark();
        for (int k = 0; k < keys; ++k) p.integer(k).short_str("v" + std::to_string(k));
        p.setitems();
        p.op('G').raw(std::string("\x3f\xf0\0\0\0\0\0\0", 8)).short_str("one").setitem();  // 1.0
        p.op('\x88').short_str("true").setitem();                                              // True
        p.integer(keys + 1).short_str("new").setitem();
        p.short_str("d").mark().short_str("s").integer(1).short_str("s").integer(2).op('d').setitem();
        p.stop();
        return p.bytes();
    };
    CHECK(repr_of(dict_of(3)) == "{0: 'v0', 1: 'true', 2: 'v2', 4: 'new', 'd': {'s': 2}}");
    std::string big = repr_of(dict_of(20));
    CHECK(big.rfind("{0: 'v0', 1: 'true', 2: 'v2', 3: 'v3', ", 0) == 0);
    CHECK_THAT(big, Catch::EndsWith("19: 'v19', 21: 'new', 'd': {'s': 2}}"));
    CHECK(big.find("'one'") == std::string::npos);

    // Large dicts of string keys are indexed by the keys' own text until a key that is not a string
    // comes; after it, the string keys set before are still found.
    PickleBuilder p;
    p.proto(2).empty_dict().mark();
    for (int k = 0; k < 20; ++k) p.short_str("k" + std::to_string(k)).integer(k);
    p.setitems();
    p.short_str("k3").short_str("again").setitem();   // found by its text
    p.integer(5).short_str("five").setitem();          // the first key that is not a string
    p.short_str("k4").short_str("again").setitem();   // found after the index is made anew
    p.op('G').raw(std::string("\x40\x14\0\0\0\0\0\0", 8)).short_str("5.0").setitem();  // 5.0 == 5
    p.stop();
    std::string strings = repr_of(p.bytes());
    CHECK(strings.rfind("{'k0': 0, 'k1': 1, 'k2': 2, 'k3': 'again', 'k4': 'again', 'k5': 5, ", 0) == 0);
    CHECK_THAT(strings, Catch::EndsWith("'k19': 19, 5: '5.0'}"));
}

TEST_CASE("pickle: protocol 4 opcodes (FRAME, MEMOIZE, STACK_GLOBAL, sets)") {
    PickleBuilder p;
    p.proto(4).op('\x95').raw(std::string("\x20\0\0\0\0\0\0\0", 8));
    p.short_str("collections").op('\x94').short_str("OrderedDict").op('\x94').op('\x93').op('\x94');
    p.op('\x8f').op('\x94').mark().integer(1).integer(2).op('\x90');
    p.mark().integer(7).op('\x91');
    p.op('\x87');  // TUPLE3
    p.stop();
    CHECK(repr_of(p.bytes()) == "(collections.OrderedDict, {1, 2}, frozenset({7}))");
}

TEST_CASE("pickle: protocol 0 text opcodes") {
    std::string p = "(dp0\nS'k'\np1\nI42\nsV\\u00e9t\\u00e9\np2\nF2.5\nsS'n'\nL12345678901L\nsS'b'\nI01\ns.";
    CHECK(repr_of(p) == "{'k': 42, 'été': 2.5, 'n': 12345678901, 'b': True}");
}

TEST_CASE("pickle: a key set twice keeps its place and the last value, as a dict does") {
    PickleBuilder p;
    p.proto(2).empty_dict().mark().str("w").integer(1).str("v").integer(2).str("w").integer(3).setitems().stop();
    CHECK(repr_of(p.bytes()) == "{'w': 3, 'v': 2}");
}

TEST_CASE("pickle: globals are inert; REDUCE of an unknown callable keeps class and arguments") {
    PickleBuilder p;
    p.proto(2).global("posix", "system").mark().str("touch /tmp/x").tuple().reduce().stop();
    Run r(p.bytes());
    REQUIRE(r.root->kind == ValueKind::object);
    CHECK(global_name(r.root->callable()) == "posix.system");
    CHECK(repr(r.root) == "posix.system('touch /tmp/x')");
}

TEST_CASE("pickle: NEWOBJ + BUILD makes an object with state (argparse.Namespace)") {
    PickleBuilder p;
    p.proto(2).global("argparse", "Namespace").empty_tuple().op('\x81').empty_dict()
        .str("lr").op('G').raw(std::string("\x3f\xb9\x99\x99\x99\x99\x99\x9a", 8)).setitem()
        .str("name").str("run").setitem().op('b').stop();
    CHECK(repr_of(p.bytes()) == "argparse.Namespace(lr=0.1, name='run')");
}

TEST_CASE("pickle: a list that contains itself is built, shown and freed without looping") {
    PickleBuilder p;
    p.proto(2).empty_list().binput(0).binget(0).op('a').stop();
    Run r(p.bytes());
    REQUIRE(r.root->items().size() == 1);
    CHECK(r.root->items()[0] == r.root);
    CHECK(repr(r.root) == "[…]");
}

TEST_CASE("pickle: hostile programs fail cleanly") {
    std::string msg;
    SECTION("unknown opcode") {
        CHECK(error_of("\x80\x02\xff.", &msg) == ErrorKind::corrupt);
        CHECK_THAT(msg, Catch::Contains("unknown opcode 0xff"));
    }
    SECTION("memo index never defined") {
        CHECK(error_of("\x80\x02h\x05.", &msg) == ErrorKind::corrupt);
        CHECK_THAT(msg, Catch::Contains("memo index 5 is not defined"));
    }
    SECTION("no STOP") {
        CHECK(error_of("\x80\x02K\x01", &msg) == ErrorKind::corrupt);
        CHECK_THAT(msg, Catch::Contains("without a STOP"));
    }
    SECTION("pop of an empty stack") {
        CHECK(error_of("\x80\x02" "0.") == ErrorKind::corrupt);
    }
    SECTION("a string length past the end") {
        CHECK(error_of(std::string("\x80\x02X\xf0\xff\xff\xff", 7) + "abc.", &msg) == ErrorKind::corrupt);
        CHECK_THAT(msg, Catch::Contains("truncated"));
    }
    SECTION("invalid UTF-8") {
        CHECK(error_of(std::string("\x80\x02X\x02\x00\x00\x00\xc3\x28.", 10)) == ErrorKind::corrupt);
    }
    SECTION("nesting 100,000 lists deep") {
        std::string deep = "\x80\x02" + std::string(100000, ']') + std::string(99999, 'a') + ".";
        CHECK(error_of(deep, &msg) == ErrorKind::limit);
        CHECK_THAT(msg, Catch::Contains("nesting deeper than 1000"));
    }
    SECTION("nesting 100,000 tuples deep") {
        std::string deep = "\x80\x02)" + std::string(100000, '\x85') + ".";
        CHECK(error_of(deep) == ErrorKind::limit);
    }
    SECTION("memo cap") {
        PickleLimits limits;
        limits.max_memo = 10;
        std::string p = "\x80\x02N";
        for (int i = 0; i < 20; ++i) p += std::string("q") + char(i);
        CHECK(error_of(p + ".", &msg, limits) == ErrorKind::limit);
    }
    SECTION("persistent id without a loader") {
        CHECK(error_of("\x80\x02K\x01Q.") == ErrorKind::unsupported);
    }
    SECTION("out-of-band buffer") {
        CHECK(error_of("\x80\x05\x97.") == ErrorKind::unsupported);
    }
    SECTION("STACK_GLOBAL of non-strings") {
        CHECK(error_of("\x80\x04K\x01K\x02\x93.") == ErrorKind::corrupt);
    }
    SECTION("SETITEM on a list") {
        CHECK(error_of("\x80\x02]K\x01K\x02s.") == ErrorKind::corrupt);
    }
    SECTION("BUILD on a tuple, empty or not (Python fails too, unless the state is empty)") {
        CHECK(error_of("\x80\x02)}b.", &msg) == ErrorKind::corrupt);
        CHECK_THAT(msg, Catch::Contains("BUILD on a tuple"));
        CHECK(error_of("\x80\x02(K\x01t}b.") == ErrorKind::corrupt);
    }
}

TEST_CASE("pickle: the empty tuple is one shared value that no opcode can change") {
    // Every tensor's OrderedDict() call pushes one: they share a constant, as ints 0..255 do.
    Run r("\x80\x02))\x86q\x01.");
    REQUIRE(r.root->kind == ValueKind::tuple);
    REQUIRE(r.root->items().size() == 2);
    CHECK(r.root->items()[0] == r.root->items()[1]);
    CHECK(r.root->items()[0] == r.arena.empty_tuple());
    CHECK(r.arena.empty_tuple()->items().empty());
    CHECK(error_of("\x80\x02)K\x01" "a.") == ErrorKind::corrupt);  // APPEND
    CHECK(error_of("\x80\x02)K\x01K\x02s.") == ErrorKind::corrupt);  // SETITEM
}

TEST_CASE("pickle: a traced run refuses short stacks as an untraced one does") {
    // Found by fuzz_pickle (fuzz/crashes/pickle-setitem-*): the trace read the key's position
    // before SETITEM had checked that there was a key, past the front of its vector.
    auto traced_error = [](const std::string& bytes) {
        ValueArena arena;
        PickleHooks hooks;
        PickleTrace trace;
        ByteView v{reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()};
        try {
            run_pickle(v, arena, hooks, "test.pkl", 0, {}, &trace);
        } catch (const Error& e) {
            return e.kind();
        }
        FAIL("no error");
        return ErrorKind::io;
    };
    for (const std::string& bytes : {std::string("\x80\x02s."), std::string("\x80\x02}K\x01s."),
                                    std::string("\x80\x02}(K\x01s."), std::string("\x80\x04\x93."),
                                    std::string("\x80\x02}(s.")}) {
        INFO("pickle of " << bytes.size() << " bytes");
        CHECK(traced_error(bytes) == ErrorKind::corrupt);
        CHECK(error_of(bytes) == ErrorKind::corrupt);
    }
}

TEST_CASE("pickle: float dict keys out of int64's range") {
    // Found by fuzz_pickle: a key of 1e300 was cast to int64 (undefined) to compare it with ints.
    // pickle.loads gives {1e+300: 1, inf: 2, -1e+300: 3, 2.0: 5}: 2 == 2.0, the later value wins.
    const std::string bytes("\x80\x02\x7d\x28\x47\x7e\x37\xe4\x3c\x88\x00\x75\x9c\x4b\x01\x47\x7f\xf0\x00\x00\x00\x00\x00\x00\x4b\x02\x47\xfe\x37\xe4\x3c\x88\x00\x75\x9c\x4b\x03\x47\x40\x00\x00\x00\x00\x00\x00\x00\x4b\x04\x4b\x02\x4b\x05\x75\x2e", 54);
    CHECK(repr_of(bytes) == "{1e+300: 1, inf: 2, -1e+300: 3, 2.0: 5}");
}

TEST_CASE("repr matches Python's for floats") {
    CHECK(repr_float(0.1) == "0.1");
    CHECK(repr_float(1.0) == "1.0");
    CHECK(repr_float(1e-05) == "1e-05");
    CHECK(repr_float(-2.5e300) == "-2.5e+300");
    CHECK(repr_float(1.0 / 0.0) == "inf");
    CHECK(big_integer_decimal(std::string("\xff", 1)) == "-1");
    CHECK(big_integer_decimal(std::string("\x00\x80", 2)) == "-32768");
}

TEST_CASE("pickle: text integers are read as CPython reads them") {
    // INT: C's strtol with base 0 first, then int(text, 0); LONG: int(text, 0).
    CHECK(repr_of("(I0x10\nI010\nI 5\nI-7\nI1_000\nL10L\nL0x1fL\nL-0o17L\nL123456789012345678901234567890L\nt.") ==
          "(16, 8, 5, -7, 1000, 10, 31, -15, 123456789012345678901234567890)");
    CHECK(repr_of("(I00\nI01\nt.") == "(False, True)");
    for (const char* bad : {"I\n.", "L010L\n.", "I1__0\n.", "Ixyz\n.", "L_1L\n.", "L0x_L\n."}) {
        INFO(bad);
        CHECK(error_of(bad) == ErrorKind::corrupt);
    }
}

// A pickle literal that may hold NUL bytes.
template <size_t N>
std::string lit(const char (&s)[N]) {
    return std::string(s, N - 1);
}

TEST_CASE("pickle: faults where CPython faults") {
    std::string message;
    // GLOBAL names are decoded as strict UTF-8 before anything is imported.
    CHECK(error_of("cmod\n\xf8\n.", &message) == ErrorKind::corrupt);
    CHECK(message.find("UTF-8") != std::string::npos);
    // A FRAME must have its bytes: the C unpickler reads them ahead.
    CHECK(error_of(std::string("\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00N.", 13), &message) == ErrorKind::corrupt);
    CHECK(message.find("FRAME") != std::string::npos);
    // Unhashable keys and items: a list as a key, a dict that is its own key, a set in itself.
    CHECK(error_of("\x80\x02}]K\x01s.") == ErrorKind::corrupt);
    CHECK(error_of(lit("\x80\x04}\x94h\x00Vv\ns."), &message) == ErrorKind::corrupt);
    CHECK(message.find("unhashable") != std::string::npos);
    CHECK(error_of(lit("\x80\x04\x8f\x94(h\x00\x90.")) == ErrorKind::corrupt);
    CHECK(error_of("\x80\x04(]\x91.") == ErrorKind::corrupt);
    // A tuple is hashable when its items are; a dict may hold itself as a value.
    CHECK(repr_of("\x80\x02}K\x01K\x02\x86K\x03s.") == "{(1, 2): 3}");
    CHECK_NOTHROW(repr_of(lit("\x80\x02}q\x00Vself\nh\x00s.")));
}

TEST_CASE("pickle: progress says how many opcodes ran before a fault") {
    ValueArena arena;
    PickleHooks hooks;
    auto run = [&](const std::string& b) {
        PickleProgress progress;
        try {
            run_pickle({reinterpret_cast<const uint8_t*>(b.data()), b.size()}, arena, hooks, "t", 0, {}, nullptr, &progress);
        } catch (const Error&) {
        }
        return progress.opcodes;
    };
    CHECK(run("\x80\x02]K\x01\x61.") == 5);  // PROTO, EMPTY_LIST, BININT1, APPEND, STOP
    CHECK(run("\x80\x04t.") == 1);          // PROTO ran, TUPLE had no MARK
    CHECK(run("cmod\n\xf8\n") == 0);        // the first opcode already fails: no pickle
    CHECK(run("\x80\x02N.") == 3);
}

TEST_CASE("pickle: the scanning hooks see what a checkpoint reader refuses") {
    struct Seen : PickleHooks {
        int computed = 0, ext = 0, mutations = 0;
        std::string written;
        ValueArena* arena = nullptr;
        Value* global(Value* g, std::string_view w) override { written += std::string(w) + ";"; return g; }
        Value* computed_global(Value* m, Value* n, uint64_t off) override {
            ++computed;
            Value* g = arena->make(ValueKind::global, off);
            (void)m, (void)n;
            return g;
        }
        Value* extension(uint32_t code, uint64_t off) override {
            ext += static_cast<int>(code);
            return arena->make(ValueKind::global, off);
        }
        void mutate(Value*, uint8_t op, uint64_t) override { mutations += op == 'b' ? 100 : 1; }
    };
    ValueArena arena;
    Seen hooks;
    hooks.arena = &arena;
    auto run = [&](const std::string& b) {
        return run_pickle({reinterpret_cast<const uint8_t*>(b.data()), b.size()}, arena, hooks, "t").root;
    };
    // STACK_GLOBAL of values computed by calls; then an EXT2 code; BUILD and SETITEM on a global.
    run(lit("\x80\x04" "cbuiltins\nstr\n(Vos\ntR" "cbuiltins\nstr\n(Vsystem\ntR" "\x93" "0" "\x83\x05\x00" "0"
            "c__builtin__\nset\n}b" "K\x01K\x02s" "0N."));
    CHECK(hooks.computed == 1);
    CHECK(hooks.ext == 5);
    CHECK(hooks.mutations == 101);
    CHECK(hooks.written == "builtins;builtins;__builtin__;");
    // The plain hooks keep refusing what no checkpoint needs.
    CHECK(error_of("\x80\x04" "cbuiltins\nstr\n)R" "K\x01\x93.") == ErrorKind::corrupt);
    CHECK(error_of("\x80\x02\x82\x01.") == ErrorKind::unsupported);
}

TEST_CASE("pickle: the opcodes run, each where it first ran, as a walk of the data finds them") {
    // weights_only's answers read them from the run instead of walking the pickle a second time.
    PickleBuilder p;
    p.proto(2).empty_dict().binput(0).mark();
    p.str("a").integer(1);
    p.str("b").empty_list().mark().integer(3).short_str("x").op('e');
    p.str("c").op('G').raw(std::string("\x3f\xb9\x99\x99\x99\x99\x99\x9a", 8));
    p.str("d").binget(0);
    p.setitems().stop();
    const std::string bytes = p.bytes();
    ByteView data{reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()};
    ValueArena arena;
    PickleHooks hooks;
    PickleResult r = run_pickle(data, arena, hooks, "test.pkl");
    std::vector<std::pair<uint8_t, uint64_t>> walked;
    bool seen[256] = {};
    for (uint64_t pos = 0; pos < data.size;) {
        uint8_t op = data.data[pos];
        if (!seen[op]) walked.push_back({op, pos}), seen[op] = true;
        uint64_t len = traced_opcode_length(data, pos);
        REQUIRE(len > 0);
        pos += len;
        if (op == '.') break;
    }
    REQUIRE(r.first_opcodes.size() >= 10);
    CHECK(r.first_opcodes.front() == std::pair<uint8_t, uint64_t>{0x80, 0});
    CHECK(r.first_opcodes.back().first == '.');
    CHECK(r.first_opcodes.back().second == bytes.size() - 1);
    CHECK(r.first_opcodes == walked);
    // Each once, in the order of first use.
    bool once[256] = {};
    bool unique = true;
    for (auto [op, pos] : r.first_opcodes) {
        unique = unique && !once[op] && data.data[pos] == op;
        once[op] = true;
    }
    CHECK(unique);
}

TEST_CASE("pickle: the VM tells where it reads as it goes, the short texts behind it copied") {
    // A reader of a mapped file gives the pages of the pickle behind the VM back as it goes
    // (PickleProgress::reading): what the values keep of them must not be views of those bytes (a
    // long text stays one, and is read again where it is used).
    PickleBuilder p;
    p.proto(2).empty_list().mark();
    const std::string long_text(5000, 'L');
    for (int n = 0; n < 120'000; ++n) p.str("layers." + std::to_string(n) + ".weight");
    p.str(long_text);
    p.op('e').stop();
    const std::string bytes = p.bytes();
    ByteView data{reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()};
    ValueArena arena;
    PickleHooks hooks;
    PickleProgress progress;
    std::vector<uint64_t> reads;
    progress.reading = [&](uint64_t pos) { reads.push_back(pos); };
    Value* root = run_pickle(data, arena, hooks, "test.pkl", 0, {}, nullptr, &progress).root;
    REQUIRE(reads.size() >= 8);  // 2.6 MB of pickle, told each 256 KiB
    CHECK(std::is_sorted(reads.begin(), reads.end()));
    CHECK(reads.back() < bytes.size());
    CHECK(reads[1] - reads[0] >= (256u << 10));
    REQUIRE(root->items().size() == 120'001);
    auto inside = [&](std::string_view s) { return s.data() >= bytes.data() && s.data() < bytes.data() + bytes.size(); };
    bool copied = true;
    for (size_t n = 0; n < 120'000; ++n) copied = copied && !inside(root->items()[n]->s());
    CHECK(copied);
    CHECK(root->items()[77]->s() == "layers.77.weight");
    CHECK(root->items()[120'000]->s() == long_text);
    CHECK(inside(root->items()[120'000]->s()));  // a long text stays a view
}
