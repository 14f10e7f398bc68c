// The value tree a pickle builds. Values live in an arena owned by whoever ran the pickle, and point
// at each other with raw pointers: memo references, shared objects and even cycles (a list that
// contains itself) cost nothing to build or to free, and no destructor recurses.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ckpt/text_store.hpp"

namespace ckpt {

enum class ValueKind : uint8_t {
    none,
    boolean,      // i: 0 or 1
    integer,      // i
    big_integer,  // s: little-endian two's complement bytes (LONG1/LONG4 past 64 bits)
    floating,     // f
    complex,      // f, f2 (builtins.complex)
    string,       // s: UTF-8
    bytes,        // s (bytes, or _codecs.encode)
    bytearray,    // s
    tuple,        // items; type_name "torch.Size" for sizes
    list,         // items
    dict,         // entries (k0, v0, k1, v1, …); type_name "collections.OrderedDict" when ordered
    set,          // items
    frozenset,    // items
    global,       // s: module, s2: name (a reference to a class or function; never resolved)
    object,       // an opaque instance: callable + args (+ state, items, entries); see `how`
    tensor,       // i: index into the reader's tensor table
    storage,      // i: index into the reader's storage table; s: "float32, 16 elements", s2: its key
    dtype,        // s2: dtype name ("float32")
    device,       // s: "cpu", "cuda", …; i: index or -1
};
// Typed values (tensor, storage, dtype, device, torch.Size, OrderedDict() …) take the place of the
// object or global the VM made for the call: a hook retypes that value, which nothing refers to yet.

// How an opaque object was made, so it can be written back the same way.
enum class MakeHow : uint8_t { reduce, newobj, newobj_ex, inst, obj };

struct Value;

// The children of a value (a container's items, or a dict's entries k0, v0, k1, v1, …) in memory of
// the arena: 16 bytes and no allocation of their own. A std::vector each cost a malloc and a free per
// tuple, and a tensor makes four tuples. Only the arena grows a list (ValueArena::append). A list's
// slots are its own, so it is not copyable (ValueArena::list_of makes a copy): the arena takes a
// small list's slots back, and gives a big one's old pages back to the kernel as it grows.
class ValueList {
public:
    ValueList() = default;
    ValueList(const ValueList& o) = delete;
    ValueList& operator=(const ValueList& o) = delete;
    // A list moved (list_of's result) keeps its room: its slots are its own.
    ValueList(ValueList&& o) noexcept : m_data(o.m_data), m_size(o.m_size), m_cap(o.m_cap) {
        o.m_data = nullptr;
        o.m_size = o.m_cap = 0;
    }
    ValueList& operator=(ValueList&& o) noexcept {
        m_data = o.m_data;
        m_size = o.m_size;
        m_cap = o.m_cap;
        o.m_data = nullptr;
        o.m_size = o.m_cap = 0;
        return *this;
    }
    size_t size() const { return m_size; }
    bool empty() const { return m_size == 0; }
    Value* operator[](size_t n) const { return m_data[n]; }
    // Replaces an element in place (a dict key set again); a copy sharing the elements sees it too.
    void set(size_t n, Value* v) { m_data[n] = v; }
    Value* front() const { return m_data[0]; }
    Value* back() const { return m_data[m_size - 1]; }
    Value* const* begin() const { return m_data; }
    Value* const* end() const { return m_data + m_size; }

private:
    friend class ValueArena;
    Value** m_data = nullptr;
    uint32_t m_size = 0, m_cap = 0;
};

// A run of values that some other storage owns (the VM's stack above a MARK, a list's elements).
struct ValueSpan {
    Value* const* data = nullptr;
    size_t count = 0;
    ValueSpan() = default;
    ValueSpan(Value* const* d, size_t n) : data(d), count(n) {}
    ValueSpan(const ValueList& l) : data(l.begin()), count(l.size()) {}  // NOLINT: a view of it
    size_t size() const { return count; }
    bool empty() const { return count == 0; }
    Value* operator[](size_t n) const { return data[n]; }
    Value* front() const { return data[0]; }
    Value* const* begin() const { return data; }
    Value* const* end() const { return data + count; }
};

struct Value {
    ValueKind kind = ValueKind::none;
    MakeHow how = MakeHow::reduce;
    // More than one place may refer to it: a constant, or a value the pickle memoizes and fetches
    // again (or may: the VM sets it for every memoized value when it cannot tell). Never recycled.
    bool shared = false;
    uint32_t depth = 0;       // nesting depth below this value (as built), capped by the VM
    union {
        int64_t i = 0;        // kinds that hold an int (see ValueKind); read only after checking the kind
        double f;             // floating, complex
    };
    double f2 = 0;
    std::string_view s;
    std::string_view s2;      // global name; type name of typed containers
    ValueList items;
    ValueList entries;            // key, value, key, value, …
    Value* callable = nullptr;    // object: the class or function (a global)
    Value* args = nullptr;        // object: the argument tuple (NEWOBJ_EX's kwargs are not kept)
    Value* state = nullptr;       // BUILD state (object attributes, OrderedDict._metadata …)
    uint64_t offset = 0;          // file offset of the opcode that made it

    bool is(ValueKind k) const { return kind == k; }
    size_t dict_size() const { return entries.size() / 2; }
    Value* dict_key(size_t n) const { return entries[2 * n]; }
    Value* dict_value(size_t n) const { return entries[2 * n + 1]; }
    // The value for a string key in a dict, or nullptr.
    Value* get(std::string_view key) const;
};

// Values, their child lists and the strings they own, in blocks that never move: a value costs no
// allocation of its own, and nothing in a Value needs a destructor, so dropping the arena frees
// blocks only. Blocks grow to 2 MiB, aligned and advised as huge pages, which fault in faster than
// 4 KiB pages (what this cost before: docs/performance.md, "What the code's shape rests on").
class ValueArena {
public:
    explicit ValueArena(uint64_t max_values = 20'000'000);
    ValueArena(const ValueArena&) = delete;
    ValueArena& operator=(const ValueArena&) = delete;
    ~ValueArena();

    // Throws Error(limit) past the cap.
    Value* make(ValueKind kind, uint64_t offset = 0);
    // A copy of `text` that lives as long as the arena.
    std::string_view own(std::string_view text);
    // Appends to a list of this arena, moving it to a block twice its capacity when full. The caller
    // checks sizes against its caps first; past 2^32 - 1 elements this throws Error(limit).
    void append(ValueList& list, Value* v) {
        if (list.m_size == list.m_cap) grow(list, 1);
        list.m_data[list.m_size++] = v;
    }
    void append(ValueList& list, ValueSpan values);
    // A list holding exactly `values` (a tuple built at once).
    ValueList list_of(ValueSpan values);

    // Recycling. A hook that has read what a value holds and knows nothing refers to it any more (a
    // tensor's rebuild arguments, once the tensor is in the table) gives it back, and make() hands
    // its memory out again: the arena then holds what the result needs, not every value the pickle
    // built (100,000 tensors made 120 MiB of values, two thirds of it such arguments). Only while
    // the VM allows it (set_recycling: a run whose memo fetches it mapped before running; under a
    // writer's trace too, which marks the persistent ids it keeps shared). `v` and its items are
    // taken back recursively (two levels down), except what is shared or of a kind a hook may hold
    // on to (tensors, globals, objects …): only tuples, lists, scalars, strings, empty dicts and
    // storages (TorchHooks makes a storage's value for each load, and keeps none; a value it hands
    // out again it marks shared). A small list's slots are taken back with it, for the next list of
    // its size: so no two lists may share slots while recycling is on (a hook copies a list into
    // slots of its own, list_of, and marks a value whose items another list holds too shared).
    void recycle(Value* v) { if (m_recycling) take_back(v, 3); }
    void set_recycling(bool on) { m_recycling = on; }

    Value* none() { return &m_none; }
    // The empty tuple is one shared constant too: the VM never adds to a tuple (APPEND, SETITEM and
    // BUILD on one are refused), and every tensor's OrderedDict() call makes one.
    Value* empty_tuple() { return &m_empty_tuple; }
    Value* boolean(bool b) { return b ? &m_true : &m_false; }
    // Ints 0..255 are shared constants (offset 0), as none and the booleans are: the VM never
    // changes an int (BUILD on one is refused), and a tensor's sizes, strides and offset are
    // mostly such ints (6 of the 18 values a tensor made).
    Value* integer(int64_t v, uint64_t offset);
    uint64_t count() const { return m_count; }
    // A pickle is done: the block mapped ahead for it is freed, and the thread that maps it stopped
    // (the next huge block asked for starts it again).
    void pause();
    // Frees every value, list and text made so far: no pointer into the arena may be used after.
    void clear();

private:
    struct FreeBlock {
        size_t mapped = 0;  // bytes of a block mapped by new_block itself; 0: from malloc
        void operator()(void* p) const;
    };
    using Block = std::unique_ptr<void, FreeBlock>;
    // A block of at least `bytes`, which it sets to the block's size: from 512 KiB up, a mapping of its
    // own in 2 MiB-aligned huge pages, returned to the kernel when freed (from malloc, a checkpoint
    // freed before the next is opened, as the writers do, left its blocks in the heap).
    static Block new_block(size_t& bytes);
    // new_block, or for a huge page, the one made ahead when it is ready.
    Block block(size_t& bytes);
    void grow(ValueList& list, size_t more);
    // Moves `list` to slots with room for `more` more; returns its old slots and their capacity,
    // for release once nothing reads them.
    std::pair<Value**, size_t> move_to_bigger(ValueList& list, size_t more);
    void release(Value** slots, size_t n);  // slots no list holds any more (nothing for a small list)
    Value** slots(size_t n);
    void take_back(Value* v, int levels);

    uint64_t m_max;
    uint64_t m_count = 0;
    std::vector<Block> m_blocks;     // values, list slots and texts
    Value* m_value_next = nullptr;   // the current block of values: next free, and how many left
    size_t m_value_left = 0, m_value_block = 0;  // values left; bytes of the last block asked for
    Value** m_slot_next = nullptr;   // the current block of list slots
    size_t m_slot_left = 0, m_slot_block = 0;    // the same for list slots
    TextStore m_texts;
    bool m_recycling = false;
    Value* m_free = nullptr;  // values given back, linked through Value::args
    // Slots of lists given back, by capacity (below k_slot_classes), each linked through its first slot.
    static constexpr size_t k_slot_classes = 17;
    Value** m_free_slots[k_slot_classes] = {};
    static Value make_constant(ValueKind kind, int64_t i) {
        Value v;
        v.kind = kind;
        v.i = i;
        v.shared = true;
        return v;
    }
    Value m_none = make_constant(ValueKind::none, 0);
    Value m_true = make_constant(ValueKind::boolean, 1);
    Value m_false = make_constant(ValueKind::boolean, 0);
    Value m_empty_tuple = make_constant(ValueKind::tuple, 0);
    static constexpr int k_small_ints = 256;
    Value m_small_ints[k_small_ints];
    // From the first huge block on (a pickle of some 4,000 values and more), the next 2 MiB block is
    // mapped and faulted in by a thread of its own while this one fills the current block.
    class Ahead;
    std::unique_ptr<Ahead> m_ahead;
    bool m_no_ahead = false;  // its thread could not be started
};

// Python-like text of a value, cut to about `max_chars` (with "…"); never recurses deeper than
// `max_depth` (deeper parts show as "…"), never loops on cycles.
std::string repr(const Value* v, size_t max_chars = 200, int max_depth = 12);
// Python's repr of a float (shortest round-trip, "1.0", "1e-05", "inf", "nan").
std::string repr_float(double d);
// Decimal text of a little-endian two's complement integer.
std::string big_integer_decimal(std::string_view le_bytes);
// "module.name" of a global value (or of an object's class), "" for anything else.
std::string global_name(const Value* v);
// Short type name for reports: "int", "str", "argparse.Namespace", "collections.OrderedDict" …
std::string type_name(const Value* v);

}  // namespace ckpt
