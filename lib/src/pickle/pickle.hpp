// A restricted pickle virtual machine: it runs the opcodes of protocols 0-5 and calls nothing.
// GLOBAL/STACK_GLOBAL push inert global values; REDUCE, NEWOBJ and friends ask the hooks whether they
// know the callable (a torch rebuild function, OrderedDict …) and otherwise build an opaque object that
// keeps its class, arguments and state. Caps on depth, memo and sizes turn hostile input into an Error.
#pragma once

#include <functional>
#include <utility>

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/bytes.hpp"
#include "ckpt/pickle_limits.hpp"
#include "ckpt/value.hpp"

namespace ckpt {

// What the VM asks of the layer that knows the meaning of globals. Each hook returns the value to push,
// or nullptr for "not mine" (the VM then builds an opaque object or fails, as the hook says).
class PickleHooks {
public:
    virtual ~PickleHooks() = default;
    // A GLOBAL, INST or STACK_GLOBAL (module already mapped to its Python 3 name; `written` is the
    // module as the pickle wrote it). Returns the value to push: the arena global `g` itself,
    // possibly retyped in place (a dtype); `g` is new, nothing refers to it.
    virtual Value* global(Value* g, std::string_view written) { (void)written; return g; }
    // REDUCE / NEWOBJ of `callable` with `args` (a tuple). `made` is the opaque object the VM built for
    // it, new, so nothing refers to it yet; return the typed value to push instead (which may be
    // `made` itself, retyped in place), or nullptr to push `made` as it is.
    virtual Value* reduce(Value* made) { (void)made; return nullptr; }
    // BINPERSID / PERSID. Return the value to push; the default refuses.
    virtual Value* persistent_load(Value* pid, uint64_t offset);

    // What a real unpickler does and a checkpoint never needs; the scanner records it and goes on.
    // STACK_GLOBAL whose operands are not two strings: the value to push, or nullptr to fail as
    // CPython fails ("STACK_GLOBAL requires str"), which is the default.
    virtual Value* computed_global(Value* module, Value* name, uint64_t offset) {
        (void)module, (void)name, (void)offset;
        return nullptr;
    }
    // EXT1/2/4 (copyreg's extension registry): the value to push, or nullptr to refuse (the default).
    virtual Value* extension(uint32_t code, uint64_t offset) { (void)code, (void)offset; return nullptr; }
    // BUILD, SETITEM(S), APPEND(S) or ADDITEMS (`opcode`) on a global or an opaque object, which a
    // real unpickler does through the target's own methods (__setstate__, __setitem__, append …).
    virtual void mutate(Value* target, uint8_t opcode, uint64_t offset) { (void)target, (void)opcode, (void)offset; }
    // After BUILD of an object: bytes its loader reads from the stream itself, past the unpickler,
    // starting at `at` (an offset in the data: where the BUILD ends, or the end of the FRAME it sits
    // in, as a Python unpickler's file reads go past the frame it buffered). joblib's
    // NumpyArrayWrapper is one: the array's raw bytes follow it, or the pickle of an object array.
    // Returns how many bytes the VM steps over there (0: none, the default).
    virtual uint64_t inline_data(Value* target, uint64_t at) { (void)target, (void)at; return 0; }
    // True when inline_data may step over bytes: the VM then keeps every memoized value, since the
    // walk that tells which are fetched again reads those bytes as opcodes.
    virtual bool may_step_over_bytes() const { return false; }
};

// Where things came from in the pickle's bytes, for writers that patch a pickle instead of
// re-serialising it (strip-prefix renames keys and leaves every other byte as it was). Positions are
// offsets from the start of the pickle data. Off by default: inspect pays nothing for it.
struct PickleTrace {
    struct KeySite {
        const Value* dict;  // the dict (or object) that received the item
        size_t entry;       // index of the entry it set (a repeated key sets its first entry again)
        const Value* key;   // the key as pushed
        uint64_t pos;       // the opcode that pushed the key
    };
    struct StringGet {
        const Value* value;  // the string (or global) a GET fetched from the memo
        uint64_t pos;        // the GET opcode
    };
    // What the writers read of the tuple a BINPERSID consumed (torch: 'storage', class, key,
    // location, numel), not the tuple: it goes back to the arena with the rebuild that read it (100,000
    // tensors kept 40 MiB of such tuples alive under a trace).
    struct PersistentIdSite {
        std::string_view first;  // its first element when a str ("storage", legacy "module"; the pickle's text)
        const Value* cls;        // its second (the storage class): a global, never recycled, or what it is (kept)
        std::string_view key;    // its third when a str (the storage key), else empty
        bool has_key;            // the third is a str
        uint64_t type_pos;       // the opcode that pushed the second element
        uint64_t view_pos;       // legacy 6-tuples: the opcode that pushed the sixth (view metadata), else 0
        // A tuple's of two or more items; its class is marked shared (read after the run: never taken back).
        static PersistentIdSite of(const Value& tuple, uint64_t type_pos, uint64_t view_pos) {
            ValueSpan it = tuple.items();
            bool has_key = it.size() > 2 && it[2]->kind == ValueKind::string;
            it[1]->shared = true;
            return {it[0]->kind == ValueKind::string ? it[0]->s() : std::string_view(), it[1],
                    has_key ? it[2]->s() : std::string_view(), has_key, type_pos, view_pos};
        }
    };
    struct StackGlobal {
        uint64_t pos;       // the STACK_GLOBAL opcode
        uint64_t name_pos;  // the opcode that pushed its name string
        const Value* name;  // that string
    };
    // Deques, not vectors: 100,000 tensors make half a million GETs, and a vector's doublings held
    // up to three times the rows (the old and the new block) at the writers' peak.
    std::deque<KeySite> key_sites;   // SETITEM, SETITEMS and DICT, in execution order
    std::deque<StringGet> string_gets;  // GETs of strings and of globals
    std::deque<PersistentIdSite> persistent_ids;  // BINPERSIDs of a tuple built just before
    std::vector<StackGlobal> stack_globals;
    std::vector<uint64_t> frames;     // FRAME opcodes (9 bytes each)
};

struct PickleResult {
    Value* root = nullptr;
    uint8_t protocol = 0;     // from PROTO, 0 when absent
    uint64_t end = 0;         // bytes consumed (up to and including STOP)
    // Each opcode the VM ran, with where (in the data) it first ran, in the order of first use: what
    // a weights-only unpickler would meet, without a second walk of the data.
    std::vector<std::pair<uint8_t, uint64_t>> first_opcodes;
};

// How far the VM got, filled in also when it throws: a scanner that catches the Error learns how
// many opcodes a real unpickler would have run before the same fault (0: the very first opcode could
// not be read, so the data is no pickle at all).
struct PickleProgress {
    uint64_t opcodes = 0;  // opcodes completed
    // When set, called now and then (each 256 KiB) with where in the data the VM reads now: it never
    // reads what lies before again, and the values keep copies of the short texts there (a long one
    // is still a view, read again where it is used). A reader of a mapped file gives its pages back
    // (PagesBehind).
    std::function<void(uint64_t)> reading;
};

// Runs the pickle in `data` (one pickle, up to its STOP). `base` is the data's offset in the file and
// `context` names it in errors ("data.pkl").
PickleResult run_pickle(ByteView data, ValueArena& arena, PickleHooks& hooks,
                        const std::string& context, uint64_t base = 0, PickleLimits limits = {},
                        PickleTrace* trace = nullptr, PickleProgress* progress = nullptr);

// Length in bytes of the opcode (with its argument) at `pos` of a pickle (the opcodes a trace points
// at: string pushes, GLOBAL, GETs, PUTs, MEMOIZE, FRAME). 0 when it is no opcode or is truncated.
uint64_t traced_opcode_length(ByteView pickle, uint64_t pos);

}  // namespace ckpt
