// The restricted pickle VM. A pickle is a program for a stack machine: one opcode byte, then its
// inline argument; pickle_ops.cpp lists them with their encodings. The VM faults where CPython's
// Modules/_pickle.c faults, so that a scanner that catches the fault knows what ran before it: GLOBAL
// and INST names are strict UTF-8, a FRAME's bytes must be there, dict keys and set items must be
// hashable, INT reads "0x1f" and "017" as strtol does, LONG any size. What it cannot know (a computed
// STACK_GLOBAL, an EXT code, BUILD or SETITEM on a global) it asks the hooks about.
#include "pickle/pickle.hpp"

#include "pickle/dict_keys.hpp"
#include "pickle/pickle_ops.hpp"
#include "pickle/pickle_text.hpp"
#include "ckpt/globals.hpp"

#include <algorithm>
#include <cstdlib>
#include <unordered_map>

namespace ckpt {

Value* PickleHooks::persistent_load(Value* /*pid*/, uint64_t offset) {
    throw Error(ErrorKind::unsupported, "", "pickle uses a persistent id where none is expected", offset);
}

namespace {

class Machine {
public:
    Machine(ByteView data, ValueArena& arena, PickleHooks& hooks, const std::string& context,
            uint64_t base, const PickleLimits& limits, PickleTrace* trace, PickleProgress* progress)
        : m_in(data, context, base), m_arena(arena), m_hooks(hooks), m_context(context),
          m_limits(limits), m_trace(trace), m_data(data) {
        if (progress && progress->reading) m_reading = &progress->reading;
        // Recycling needs a map of the memo's fetches; a trace points only at what no hook gives back, or marks it shared.
        m_recycle = !hooks.may_step_over_bytes() && pickle_ops::memo_fetches(data, m_fetched);
    }
    bool recycles() const { return m_recycle; }

    PickleResult run();
    uint64_t done() const { return m_done; }

private:
    [[noreturn]] void fail(const std::string& what) const {
        throw Error(ErrorKind::corrupt, "", m_context + ": " + what, m_op_offset);
    }
    [[noreturn]] void limit(const std::string& what) const {
        throw Error(ErrorKind::limit, "", m_context + ": " + what, m_op_offset);
    }

    size_t mark_base() const { return m_marks.empty() ? 0 : m_marks.back(); }
    void push(Value* v) {
        if (m_stack.size() >= m_limits.max_stack) limit("stack grows past its limit");
        m_stack.push_back(v);
        if (m_trace) m_push_pos.push_back(m_op_pos);
    }
    Value* pop() {
        if (m_stack.size() <= mark_base()) fail("pops an empty stack (or past a MARK)");
        Value* v = m_stack.back();
        m_stack.pop_back();
        if (m_trace) m_push_pos.pop_back();
        return v;
    }
    Value* top() {
        if (m_stack.size() <= mark_base()) fail("needs a value on an empty stack");
        return m_stack.back();
    }
    // The values above the last MARK, popped: a view of the stack's storage, valid until the next
    // push (shrinking a vector keeps its storage), which every caller consumes before pushing.
    ValueSpan pop_mark() {
        if (m_marks.empty()) fail("needs a MARK but there is none");
        size_t base = m_marks.back();
        m_marks.pop_back();
        ValueSpan items(m_stack.data() + base, m_stack.size() - base);
        m_stack.resize(base);
        if (m_trace) {
            m_popped_pos.assign(m_push_pos.begin() + static_cast<long>(base), m_push_pos.end());
            m_push_pos.resize(base);
        }
        return items;
    }
    // Records that `child` now sits inside `parent`, enforcing the depth and size caps.
    void adopt(Value* parent, const Value* child) {
        if (child->depth + 1 > parent->depth) {
            parent->depth = child->depth + 1;
            if (parent->depth > m_limits.max_depth)
                limit("nesting deeper than " + std::to_string(m_limits.max_depth) + " levels");
        }
    }
    void check_size(uint64_t n) {
        if (n > m_limits.max_container)
            limit("a container holds more than " + std::to_string(m_limits.max_container) + " items");
    }
    Value* make_seq(ValueKind kind, ValueSpan items) {
        check_size(items.size());
        Value* v = m_arena.make(kind, m_op_offset);
        for (Value* c : items) adopt(v, c);
        m_arena.set_items(v, items);
        return v;
    }
    // A short text is copied into the arena (the data's pages may be given back behind the VM,
    // PickleProgress::reading); a long one stays a view of the data.
    std::string_view keep(std::string_view text) { return text.size() <= k_copied_text ? m_arena.own(text) : text; }
    Value* make_string(ValueKind kind, ByteView b) {
        Value* v = m_arena.make(kind, m_op_offset);
        v->set_s(keep(b.as_chars()));
        if (kind == ValueKind::string && !pickle_text::valid_utf8(v->s())) fail("string is not valid UTF-8");
        return v;
    }
    Value* make_int_bytes(ByteView b) {
        if (b.size <= 8) {
            uint64_t u = load_le(b.data, static_cast<int>(b.size));
            if (b.size > 0 && b.size < 8 && (b.data[b.size - 1] & 0x80)) u |= ~0ull << (8 * b.size);
            return m_arena.integer(static_cast<int64_t>(u), m_op_offset);
        }
        Value* v = m_arena.make(ValueKind::big_integer, m_op_offset);
        v->set_s(keep(b.as_chars()));
        return v;
    }
    Value* push_integer(const pickle_text::Integer& n) {
        if (n.fits) return m_arena.integer(n.small, m_op_offset);
        Value* v = m_arena.make(ValueKind::big_integer, m_op_offset);
        v->set_s(m_arena.own(n.big));
        return v;
    }
    Value* parse_int_line(std::string_view line) {
        if (line == "00") return m_arena.boolean(false);
        if (line == "01") return m_arena.boolean(true);
        pickle_text::Integer n;
        if (!pickle_text::int_literal(line, n)) fail("bad integer literal");
        return push_integer(n);
    }
    Value* parse_long_line(std::string_view line) {
        if (!line.empty() && line.back() == 'L') line.remove_suffix(1);
        pickle_text::Integer n;
        if (!pickle_text::long_literal(line, n)) fail("bad long integer literal");
        return push_integer(n);
    }
    // GLOBAL and INST read their names as UTF-8 text (Modules/_pickle.c decodes them strictly and
    // fails before it imports anything); STACK_GLOBAL's strings were checked when pushed.
    Value* make_global(std::string_view module, std::string_view name) {
        if (module.empty() || name.empty()) fail("global with an empty module or name");
        if (!pickle_text::valid_utf8(module) || !pickle_text::valid_utf8(name)) fail("global name is not valid UTF-8");
        Value* g = m_arena.make(ValueKind::global, m_op_offset);
        std::string mod = python3_module(module);
        g->set_s(mod == module ? keep(module) : m_arena.own(std::move(mod)));
        g->s2 = keep(name);
        Value* out = m_hooks.global(g, module);
        return out ? out : g;
    }
    Value* make_object(MakeHow how, Value* callable, Value* args, Value* kwargs) {
        Value* o = m_arena.make(ValueKind::object, m_op_offset);
        o->how = how;
        o->set_callable(callable);
        o->set_args(args);
        adopt(o, callable);
        adopt(o, args);
        if (kwargs) adopt(o, kwargs);
        ++m_hook_calls;
        Value* typed = m_hooks.reduce(o);
        return typed ? typed : o;
    }
    // Protocol 0 text arguments (pickle_text.cpp), kept in the arena.
    using Unescape = bool (*)(std::string_view, std::string&, std::string&);
    std::string_view unescape(Unescape how, std::string_view line) {
        std::string out, error;
        if (!how(line, out, error)) fail(error);
        return m_arena.own(std::move(out));
    }
    // Writers number memo entries densely from 0, so a vector serves them; a sparse or huge index
    // (only a hostile pickle writes one) goes to the map and costs what it holds, not its value.
    // When the fetches are known (m_recycle), every index is below 2^24 and only a value some GET
    // fetches is kept: the others are counted in m_put (torch.save memoizes ~10 values a tensor).
    void memo_put(uint64_t index) {
        Value* v = top();
        bool kept = !m_recycle || (index < m_fetched.size() && m_fetched[index]);
        if (kept) v->shared = true;
        bool dense = index < m_memo_dense.size() + 4096;
        bool fresh = m_recycle ? index >= m_put.size() || !m_put[index]
                               : dense ? index >= m_memo_dense.size() || !m_memo_dense[index] : !m_memo.count(index);
        if (fresh && ++m_memo_count > m_limits.max_memo)
            limit("memo grows past " + std::to_string(m_limits.max_memo) + " entries");
        if (m_recycle) {
            if (index >= m_put.size()) m_put.resize(std::max<uint64_t>(index + 1, m_put.size() * 2));
            m_put[index] = true;
            if (!kept) return;
        }
        if (dense) {
            if (index == m_memo_dense.size()) m_memo_dense.push_back(nullptr);  // the usual next index
            else if (index > m_memo_dense.size()) m_memo_dense.resize(index + 1, nullptr);
            m_memo_dense[index] = v;
        } else {
            m_memo[index] = v;
        }
    }
    Value* memo_get(uint64_t index) {
        if (index < m_memo_dense.size() && m_memo_dense[index]) return m_memo_dense[index];
        auto it = m_memo.find(index);
        if (it == m_memo.end()) fail("memo index " + std::to_string(index) + " is not defined");
        return it->second;
    }
    uint64_t parse_index_line(std::string_view line) {
        uint64_t v = 0;
        if (!pickle_text::memo_index(line, v)) fail("bad memo index");
        return v;
    }
    // Dict semantics: a key set again keeps its first position and takes the new value, as
    // torch.load would see it (a hostile file may repeat a key to hide a tensor).
    // `key_pos`, when tracing: where each pair's key was pushed (parallel to kv).
    void set_items(Value* target, ValueSpan kv, const uint64_t* key_pos = nullptr) {
        if (kv.size() % 2) fail("SETITEMS with an odd number of values");
        if (target->kind == ValueKind::object || target->kind == ValueKind::global)
            m_hooks.mutate(target, m_op, m_op_offset);
        else if (target->kind != ValueKind::dict)
            fail("SETITEM on a " + type_name(target));
        check_size(target->entries().size() + kv.size());
        for (size_t n = 0; n < kv.size(); n += 2) {
            require_hashable(kv[n]);
            adopt(target, kv[n]);
            adopt(target, kv[n + 1]);
            auto [pos, fresh] = m_dict_keys.place(target, kv[n]);
            if (!fresh) {
                target->set_entry(pos + 1, kv[n + 1]);
                if (key_pos) m_trace->key_sites.push_back({target, pos / 2, kv[n], key_pos[n]});
                continue;
            }
            if (key_pos) m_trace->key_sites.push_back({target, target->entries().size() / 2, kv[n], key_pos[n]});
            m_arena.append_entry(target, kv[n], kv[n + 1]);
        }
    }
    // A dict key or set item Python can hash: CPython raises TypeError on a list, dict, set or
    // bytearray (a dict that contains itself as a key is one), so the VM fails where it fails.
    void require_hashable(const Value* v) {
        switch (v->kind) {
            case ValueKind::list: case ValueKind::dict: case ValueKind::set: case ValueKind::bytearray:
                fail("a " + type_name(v) + " used as a dict key or set item (unhashable: the unpickler raises TypeError)");
            case ValueKind::tuple:
                for (const Value* x : v->items()) require_hashable(x);
                return;
            default: return;
        }
    }
    void append_items(Value* target, ValueSpan items) {
        if (target->kind == ValueKind::object || target->kind == ValueKind::global)
            m_hooks.mutate(target, m_op, m_op_offset);
        else if (target->kind != ValueKind::list)
            fail("APPEND on a " + type_name(target));
        check_size(target->items().size() + items.size());
        for (Value* v : items) {
            adopt(target, v);
            m_arena.append_item(target, v);
        }
    }

    ByteReader m_in;
    ValueArena& m_arena;
    PickleHooks& m_hooks;
    const std::string& m_context;
    PickleLimits m_limits;
    std::vector<Value*> m_stack;
    std::vector<size_t> m_marks;
    std::unordered_map<uint64_t, Value*> m_memo;
    std::vector<Value*> m_memo_dense;
    uint64_t m_memo_count = 0;
    bool m_recycle = false;
    std::vector<bool> m_fetched, m_put;  // pickle_ops::memo_fetches; the indices put (m_recycle)
    DictKeys m_dict_keys;
    uint64_t m_op_offset = 0;
    uint64_t m_op_pos = 0;                // m_op_offset within the pickle
    uint8_t m_op = 0;                     // the opcode being run
    uint64_t m_done = 0;                  // opcodes completed (PickleProgress)
    uint64_t m_frame_end = 0;             // where the last FRAME's bytes end
    uint64_t m_skip_at = UINT64_MAX, m_skip_len = 0;  // inline bytes to step over (PickleHooks::inline_data)
    PickleTrace* m_trace;
    ByteView m_data;
    bool m_ran[256] = {};  // opcodes run so far (PickleResult::first_opcodes)
    const std::function<void(uint64_t)>* m_reading = nullptr;  // PickleProgress::reading
    uint64_t m_next_report = 0;
    static constexpr size_t k_copied_text = 4096;
    static constexpr uint64_t k_report_step = 256u << 10;
    std::vector<uint64_t> m_push_pos;     // tracing: the opcode that pushed each stack slot
    std::vector<uint64_t> m_popped_pos;   // tracing: positions of what pop_mark returned
    const Value* m_last_tuple = nullptr;  // tracing: the last MARK … TUPLE, and where its items came from
    uint64_t m_hook_calls = 0, m_last_tuple_calls = 0;  // calls of the hooks that give values back; before that TUPLE
    std::vector<uint64_t> m_last_tuple_pos;
    const uint64_t* popped_pos() const { return m_trace ? m_popped_pos.data() : nullptr; }
    Value* traced_get(Value* v) {
        if (m_trace && (v->kind == ValueKind::string || v->kind == ValueKind::global))
            m_trace->string_gets.push_back({v, m_op_pos});
        return v;
    }
};

PickleResult Machine::run() {
    PickleResult result;
    for (;; ++m_done) {
        m_op_offset = m_in.file_offset();
        m_op_pos = m_in.pos();
        if (m_reading && m_op_pos >= m_next_report) {
            (*m_reading)(m_op_pos);
            m_next_report = m_op_pos + k_report_step;
        }
        if (m_skip_at != UINT64_MAX && m_op_pos >= m_skip_at) {  // inline bytes a loader reads (inline_data)
            if (m_op_pos > m_skip_at) fail("an opcode runs into the bytes its loader reads after a frame");
            m_in.seek(m_skip_at + std::min(m_skip_len, m_data.size - m_skip_at));
            m_skip_at = UINT64_MAX;
            m_op_offset = m_in.file_offset();
            m_op_pos = m_in.pos();
        }
        if (m_in.at_end()) fail("ends without a STOP opcode (truncated?)");
        uint8_t op = m_op = m_in.u8();
        if (!m_ran[op]) {
            m_ran[op] = true;
            result.first_opcodes.push_back({op, m_op_pos});
        }
        switch (op) {
            case 0x80: result.protocol = m_in.u8(); if (result.protocol > 5) fail("unknown protocol " + std::to_string(result.protocol)); break;
            case 0x95: {  // FRAME: the next N bytes must be there (Modules/_pickle.c reads them ahead)
                uint64_t n = m_in.u64le();
                if (n > m_in.remaining()) fail("FRAME of " + std::to_string(n) + " bytes runs past the end of the data");
                m_frame_end = m_in.pos() + n;
                if (m_trace) m_trace->frames.push_back(m_op_pos);
                break;
            }
            case '.': {
                result.root = pop();
                result.end = m_in.pos();
                ++m_done;
                return result;
            }
            case '(':
                if (m_marks.size() >= m_limits.max_stack) limit("too many MARKs");
                m_marks.push_back(m_stack.size());
                break;
            case '0':
                if (m_stack.size() > mark_base()) pop();
                else pop_mark();
                break;
            case '1': pop_mark(); break;
            case '2': push(top()); break;
            case 'F': {
                std::string text(m_in.line());
                char* end = nullptr;
                double d = std::strtod(text.c_str(), &end);
                if (text.empty() || *end != '\0') fail("bad float literal");
                Value* v = m_arena.make(ValueKind::floating, m_op_offset);
                v->set_f(d);
                push(v);
                break;
            }
            case 'G': {
                Value* v = m_arena.make(ValueKind::floating, m_op_offset);
                v->set_f(m_in.f64be());
                push(v);
                break;
            }
            case 'I': push(parse_int_line(m_in.line())); break;
            case 'L': push(parse_long_line(m_in.line())); break;
            case 'J': push(m_arena.integer(m_in.i32le(), m_op_offset)); break;
            case 'K': push(m_arena.integer(m_in.u8(), m_op_offset)); break;
            case 'M': push(m_arena.integer(m_in.u16le(), m_op_offset)); break;
            case 0x8a: push(make_int_bytes(m_in.bytes(m_in.u8()))); break;
            case 0x8b: {
                int32_t n = m_in.i32le();
                if (n < 0) fail("LONG4 with a negative length");
                push(make_int_bytes(m_in.bytes(static_cast<uint64_t>(n))));
                break;
            }
            case 'S': {
                Value* v = m_arena.make(ValueKind::string, m_op_offset);
                v->set_s(unescape(pickle_text::string_literal, m_in.line()));
                push(v);
                break;
            }
            case 'T': {
                int32_t n = m_in.i32le();
                if (n < 0) fail("BINSTRING with a negative length");
                push(make_string(ValueKind::string, m_in.bytes(static_cast<uint64_t>(n))));
                break;
            }
            case 'U': push(make_string(ValueKind::string, m_in.bytes(m_in.u8()))); break;
            case 'V': {
                Value* v = m_arena.make(ValueKind::string, m_op_offset);
                v->set_s(unescape(pickle_text::raw_unicode, m_in.line()));
                push(v);
                break;
            }
            case 'X': push(make_string(ValueKind::string, m_in.bytes(m_in.u32le()))); break;
            case 0x8c: push(make_string(ValueKind::string, m_in.bytes(m_in.u8()))); break;
            case 0x8d: push(make_string(ValueKind::string, m_in.bytes(m_in.u64le()))); break;
            case 'B': push(make_string(ValueKind::bytes, m_in.bytes(m_in.u32le()))); break;
            case 'C': push(make_string(ValueKind::bytes, m_in.bytes(m_in.u8()))); break;
            case 0x8e: push(make_string(ValueKind::bytes, m_in.bytes(m_in.u64le()))); break;
            case 0x96: push(make_string(ValueKind::bytearray, m_in.bytes(m_in.u64le()))); break;
            case 0x97:
            case 0x98:
                throw Error(ErrorKind::unsupported, "",
                            m_context + ": out-of-band buffers (pickle protocol 5) are not read",
                            m_op_offset);
            case 'N': push(m_arena.none()); break;
            case 0x88: push(m_arena.boolean(true)); break;
            case 0x89: push(m_arena.boolean(false)); break;
            case ')': push(m_arena.empty_tuple()); break;
            case 't': {
                Value* t = make_seq(ValueKind::tuple, pop_mark());
                if (m_trace) {
                    m_last_tuple = t;
                    m_last_tuple_calls = m_hook_calls;
                    m_last_tuple_pos = m_popped_pos;
                }
                push(t);
                break;
            }
            case 0x85: case 0x86: case 0x87: {  // TUPLE1-3
                Value* abc[3];
                size_t n = op - 0x84u;
                for (size_t k = n; k-- > 0;) abc[k] = pop();
                push(make_seq(ValueKind::tuple, {abc, n}));
                break;
            }
            case ']': push(make_seq(ValueKind::list, ValueSpan())); break;
            case 'l': push(make_seq(ValueKind::list, pop_mark())); break;
            case '}': push(m_arena.make(ValueKind::dict, m_op_offset)); break;
            case 'd': {
                ValueSpan kv = pop_mark();
                Value* d = m_arena.make(ValueKind::dict, m_op_offset);
                set_items(d, kv, popped_pos());
                push(d);
                break;
            }
            case 0x8f: push(make_seq(ValueKind::set, ValueSpan())); break;
            case 0x91: {
                ValueSpan items = pop_mark();
                for (Value* v : items) require_hashable(v);
                push(make_seq(ValueKind::frozenset, items));
                break;
            }
            case 0x90: {
                ValueSpan items = pop_mark();
                Value* s = top();
                if (s->kind == ValueKind::global || s->kind == ValueKind::object) m_hooks.mutate(s, op, m_op_offset);
                else if (s->kind != ValueKind::set) fail("ADDITEMS on a " + type_name(s));
                check_size(s->items().size() + items.size());
                for (Value* v : items) {
                    require_hashable(v);
                    adopt(s, v);
                }
                m_arena.append_items(s, items);
                break;
            }
            case 'a': { Value* v = pop(); append_items(top(), {&v, 1}); break; }
            case 'e': { ValueSpan items = pop_mark(); append_items(top(), items); break; }
            case 's': {
                Value* v = pop();
                uint64_t key_pos[2] = {m_trace && !m_push_pos.empty() ? m_push_pos.back() : 0, 0};
                Value* kv[2] = {pop(), v};
                set_items(top(), {kv, 2}, m_trace ? key_pos : nullptr);
                break;
            }
            case 'u': { ValueSpan kv = pop_mark(); set_items(top(), kv, popped_pos()); break; }
            case 'c': {
                std::string_view module = m_in.line();
                std::string_view name = m_in.line();
                push(make_global(module, name));
                break;
            }
            case 0x93: {
                if (m_trace && m_stack.size() > mark_base())
                    m_trace->stack_globals.push_back({m_op_pos, m_push_pos.back(), m_stack.back()});
                Value* name = pop();
                Value* module = pop();
                bool strings = module->kind == ValueKind::string && name->kind == ValueKind::string;
                Value* v = strings ? make_global(module->s(), name->s()) : m_hooks.computed_global(module, name, m_op_offset);
                if (!v) fail("STACK_GLOBAL needs two strings");
                push(v);
                break;
            }
            case 'i': {
                std::string_view module = m_in.line();
                std::string_view name = m_in.line();
                Value* cls = make_global(module, name);
                Value* args = make_seq(ValueKind::tuple, pop_mark());
                push(make_object(MakeHow::inst, cls, args, nullptr));
                break;
            }
            case 'o': {
                ValueSpan items = pop_mark();
                if (items.empty()) fail("OBJ without a class");
                Value* cls = items.front();
                Value* args = make_seq(ValueKind::tuple, {items.begin() + 1, items.size() - 1});
                push(make_object(MakeHow::obj, cls, args, nullptr));
                break;
            }
            case 'R': {
                Value* args = pop();
                Value* callable = pop();
                if (args->kind != ValueKind::tuple) fail("REDUCE arguments are not a tuple");
                push(make_object(MakeHow::reduce, callable, args, nullptr));
                break;
            }
            case 0x81: {
                Value* args = pop();
                Value* cls = pop();
                if (args->kind != ValueKind::tuple) fail("NEWOBJ arguments are not a tuple");
                push(make_object(MakeHow::newobj, cls, args, nullptr));
                break;
            }
            case 0x92: {
                Value* kwargs = pop();
                Value* args = pop();
                Value* cls = pop();
                if (args->kind != ValueKind::tuple || kwargs->kind != ValueKind::dict)
                    fail("NEWOBJ_EX needs a tuple and a dict");
                push(make_object(MakeHow::newobj_ex, cls, args, kwargs));
                break;
            }
            case 'b': {
                Value* state = pop();
                Value* target = top();
                if (target->kind == ValueKind::none || target->kind == ValueKind::boolean ||
                    target->kind == ValueKind::integer || target->kind == ValueKind::tuple)
                    fail("BUILD on a " + type_name(target));
                if (target->kind == ValueKind::global || target->kind == ValueKind::object)
                    m_hooks.mutate(target, op, m_op_offset);
                adopt(target, state);
                if (target->state && target->state->kind == ValueKind::dict &&
                    state->kind == ValueKind::dict) {
                    set_items(target->state, state->entries());
                } else {
                    target->state = state;
                }
                if (target->kind == ValueKind::object && m_skip_at == UINT64_MAX) {
                    uint64_t at = std::max(m_in.pos(), m_frame_end);
                    if (uint64_t n = m_hooks.inline_data(target, at)) {
                        m_skip_at = at;
                        m_skip_len = n;
                    }
                }
                break;
            }
            case 'p': memo_put(parse_index_line(m_in.line())); break;
            case 'q': memo_put(m_in.u8()); break;
            case 'r': memo_put(m_in.u32le()); break;
            case 0x94: memo_put(m_memo_count); break;  // MEMOIZE: index = len(memo)
            case 'g': push(traced_get(memo_get(parse_index_line(m_in.line())))); break;
            case 'h': push(traced_get(memo_get(m_in.u8()))); break;
            case 'j': push(traced_get(memo_get(m_in.u32le()))); break;
            case 'P': {
                Value* pid = m_arena.make(ValueKind::string, m_op_offset);
                pid->set_s(keep(m_in.line()));
                ++m_hook_calls;
                push(m_hooks.persistent_load(pid, m_op_offset));
                break;
            }
            case 'Q': {
                Value* pid = pop();
                // The tuple just built, unless a hook ran since (one may give it back, its address reused)
                if (m_trace && pid == m_last_tuple && m_last_tuple_calls == m_hook_calls && m_last_tuple_pos.size() >= 2) {
                    m_trace->persistent_ids.push_back(PickleTrace::PersistentIdSite::of(
                        *pid, m_last_tuple_pos[1], m_last_tuple_pos.size() == 6 ? m_last_tuple_pos[5] : 0));
                }
                ++m_hook_calls;
                push(m_hooks.persistent_load(pid, m_op_offset));
                break;
            }
            case 0x82: case 0x83: case 0x84: {
                uint32_t code = op == 0x82 ? m_in.u8() : op == 0x83 ? m_in.u16le() : m_in.u32le();
                if (code == 0) fail("extension code 0");  // CPython: "EXT specifies code <= 0"
                Value* v = m_hooks.extension(code, m_op_offset);
                if (!v)
                    throw Error(ErrorKind::unsupported, "",
                                m_context + ": extension registry codes (EXT1/2/4) are not read", m_op_offset);
                push(v);
                break;
            }
            default: {
                char buf[8];
                std::snprintf(buf, sizeof buf, "0x%02x", op);
                fail(std::string("unknown opcode ") + buf);
            }
        }
    }
}

}  // namespace

PickleResult run_pickle(ByteView data, ValueArena& arena, PickleHooks& hooks,
                        const std::string& context, uint64_t base, PickleLimits limits,
                        PickleTrace* trace, PickleProgress* progress) {
    Machine m(data, arena, hooks, context, base, limits, trace, progress);
    arena.set_recycling(m.recycles());
    try {
        PickleResult r = m.run();
        arena.set_recycling(false);
        arena.pause();
        if (progress) progress->opcodes = m.done();
        return r;
    } catch (...) {
        arena.set_recycling(false);
        if (progress) progress->opcodes = m.done();
        throw;
    }
}

uint64_t traced_opcode_length(ByteView pickle, uint64_t pos) { return pickle_ops::length(pickle, pos); }

}  // namespace ckpt
