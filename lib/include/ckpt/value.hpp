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
// tuple, and a tensor makes four tuples. Only the arena makes or grows one (ValueArena::set_items,
// append_items …): the arena takes a small list's slots back, and gives a big one's old pages back to
// the kernel as it grows. Readers see a value's lists as ValueSpans (Value::items, Value::entries).
class ValueList {
    friend class ValueArena;
    friend struct Value;
    Value** m_data;
    uint32_t m_size, m_cap;
};

// A run of values that some other storage owns (the VM's stack above a MARK, a value's items).
struct ValueSpan {
    Value* const* data = nullptr;
    size_t count = 0;
    ValueSpan() = default;
    ValueSpan(Value* const* d, size_t n) : data(d), count(n) {}
    size_t size() const { return count; }
    bool empty() const { return count == 0; }
    Value* operator[](size_t n) const { return data[n]; }
    Value* front() const { return data[0]; }
    Value* back() const { return data[count - 1]; }
    Value* const* begin() const { return data; }
    Value* const* end() const { return data + count; }
};

// 64 bytes. What a value holds beyond its kind, offset, s2 and state depends on its kind (see
// ValueKind), and shares room: an int, a string, a container's list and an object's call are never
// held at once. So those are read through accessors that check the kind and give an empty answer
// (0, "", no items, nullptr) for a kind that holds no such thing, as the fields of a bigger value
// did; they are written through setters that refuse a kind without room for it (an internal error,
// never memory of another kind's). 100,000 tensors make 200,000–400,000 values: at 120 bytes each,
// half the memory of opening such a file (docs/performance.md, "fifth step").
struct Value {
    ValueKind kind = ValueKind::none;
    MakeHow how = MakeHow::reduce;
    // More than one place may refer to it: a constant, or a value the pickle memoizes and fetches
    // again (or may: the VM sets it for every memoized value when it cannot tell). Never recycled.
    bool shared = false;
    uint32_t depth = 0;       // nesting depth below this value (as built), capped by the VM
    uint64_t offset = 0;      // file offset of the opcode that made it
    std::string_view s2;      // global name; type name of typed containers; a storage's key; a dtype's name
    Value* state = nullptr;   // BUILD state (object attributes, OrderedDict._metadata …), of any kind

    bool is(ValueKind k) const { return kind == k; }
    // boolean, integer, tensor, storage (indices), device (its index or -1); 0 for other kinds
    int64_t i() const { return holds_number() ? m.text.n.i : 0; }
    double f() const { return kind == ValueKind::floating || kind == ValueKind::complex ? m.text.n.f : 0; }
    double f2() const;  // complex: the imaginary part
    // big_integer, string, bytes, bytearray, global (module), tensor, storage, device; "" for others
    std::string_view s() const { return holds_text() ? m.text.s : std::string_view(); }
    // tuple, list, set, frozenset; an object's or global's APPENDS; empty for other kinds
    ValueSpan items() const;
    // dict (k0, v0, k1, v1, …); an object's or global's SETITEMS; empty for other kinds
    ValueSpan entries() const;
    Value* callable() const { return kind == ValueKind::object ? m.obj.callable : nullptr; }  // the class or function
    Value* args() const { return kind == ValueKind::object ? m.obj.args : nullptr; }  // the argument tuple (NEWOBJ_EX's kwargs are not kept)

    void set_i(int64_t v);
    void set_f(double v);
    void set_f2(double v);
    void set_s(std::string_view v);
    void set_callable(Value* v);
    void set_args(Value* v);
    // Replaces an item or entry in place (a dict key set again); n < items().size() / entries().size().
    void set_item(size_t n, Value* v) { items_list()->m_data[n] = v; }
    void set_entry(size_t n, Value* v) { entries_list()->m_data[n] = v; }

    size_t dict_size() const { return entries().size() / 2; }
    Value* dict_key(size_t n) const { return entries()[2 * n]; }
    Value* dict_value(size_t n) const { return entries()[2 * n + 1]; }
    // The value for a string key in a dict, or nullptr.
    Value* get(std::string_view key) const;

private:
    friend class ValueArena;
    // An object's or global's items and entries, made on its first APPENDS or SETITEMS (rare).
    struct Lists {
        ValueList items, entries;
    };
    // Scalars and text: a number (or a global's lists, a global holding no number), then a text (or
    // a complex's imaginary part in its first bytes, a complex holding no text).
    struct Text {
        union {
            int64_t i;
            double f;
            Lists* lists;
        } n;
        std::string_view s;
    };
    struct Object {
        Lists* lists;  // first, where a global keeps its own
        Value* callable;
        Value* args;
    };
    union Payload {
        Text text{};
        ValueList list;  // tuple, list, set, frozenset: items; dict: entries
        Object obj;
    } m;

    bool holds_number() const {
        switch (kind) {
            case ValueKind::boolean: case ValueKind::integer: case ValueKind::tensor: case ValueKind::storage:
            case ValueKind::device: return true;
            default: return false;
        }
    }
    bool holds_text() const {
        switch (kind) {
            case ValueKind::big_integer: case ValueKind::string: case ValueKind::bytes: case ValueKind::bytearray:
            case ValueKind::global: case ValueKind::tensor: case ValueKind::storage: case ValueKind::device: return true;
            default: return false;
        }
    }
    bool holds_list() const {
        switch (kind) {
            case ValueKind::tuple: case ValueKind::list: case ValueKind::set: case ValueKind::frozenset:
            case ValueKind::dict: return true;
            default: return false;
        }
    }
    // The room for the kind's items / entries, made if need be (`arena`); nullptr without one: the
    // kind holds none.
    Lists* lists() const {
        if (kind == ValueKind::object) return m.obj.lists;
        if (kind == ValueKind::global) return m.text.n.lists;
        return nullptr;
    }
    const ValueList* items_list() const;
    const ValueList* entries_list() const;
    ValueList* items_list() { return const_cast<ValueList*>(static_cast<const Value*>(this)->items_list()); }
    ValueList* entries_list() { return const_cast<ValueList*>(static_cast<const Value*>(this)->entries_list()); }
};

inline ValueSpan Value::items() const {
    const ValueList* l = items_list();
    return l ? ValueSpan(l->m_data, l->m_size) : ValueSpan();
}
inline ValueSpan Value::entries() const {
    const ValueList* l = entries_list();
    return l ? ValueSpan(l->m_data, l->m_size) : ValueSpan();
}
inline const ValueList* Value::items_list() const {
    if (kind == ValueKind::dict) return nullptr;
    if (holds_list()) return &m.list;
    const Lists* l = lists();
    return l ? &l->items : nullptr;
}
inline const ValueList* Value::entries_list() const {
    if (kind == ValueKind::dict) return &m.list;
    const Lists* l = lists();
    return l ? &l->entries : nullptr;
}

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
    // Appends to a value's items (a list, set, or an object's or global's APPENDS) or entries (a
    // dict, or an object's or global's SETITEMS: key, value, …), moving them to a block twice their
    // capacity when full. The caller checks sizes against its caps first; past 2^32 - 1 elements
    // this throws Error(limit). A kind without room for them is an internal error.
    void append_item(Value* to, Value* v) { append(items_room(to), v); }
    void append_items(Value* to, ValueSpan values) { append(items_room(to), values); }
    void append_entry(Value* to, Value* key, Value* v) {
        ValueList& l = entries_room(to);
        append(l, key);
        append(l, v);
    }
    void append_entries(Value* to, ValueSpan kv) { append(entries_room(to), kv); }
    // A tuple, list, set or frozenset made with no items gets exactly `values` (a tuple built at
    // once); they are copied into slots of its own.
    void set_items(Value* v, ValueSpan values);
    // A new value of `v`'s kind holding what `v` holds itself (its number, float parts, texts, how,
    // depth), its texts copied into this arena; its children (items, entries, callable, args,
    // state) are left for the caller to copy.
    Value* copy_shell(const Value* v);

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
    // slots of its own, set_items, and marks a value whose items another list holds too shared).
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
    void append(ValueList& list, Value* v) {
        if (list.m_size == list.m_cap) grow(list, 1);
        list.m_data[list.m_size++] = v;
    }
    void append(ValueList& list, ValueSpan values);
    // Where a value's items / entries go; an object's or global's made on first use.
    ValueList& items_room(Value* v);
    ValueList& entries_room(Value* v);
    Value::Lists& lists_of(Value* v);
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
    Value* m_free = nullptr;  // values given back, linked through Value::state
    // Slots of lists given back, by capacity (below k_slot_classes), each linked through its first slot.
    static constexpr size_t k_slot_classes = 17;
    Value** m_free_slots[k_slot_classes] = {};
    static Value make_constant(ValueKind kind, int64_t i) {
        Value v;
        v.kind = kind;
        v.m.text.n.i = i;
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
