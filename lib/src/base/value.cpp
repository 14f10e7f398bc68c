#include "ckpt/value.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>

#include <condition_variable>
#include <mutex>
#include <system_error>
#include <thread>

#include <sys/mman.h>

#include "ckpt/error.hpp"
#include "base/huge_pages.hpp"

namespace ckpt {

Value* Value::get(std::string_view key) const {
    for (size_t n = 0; n < dict_size(); ++n) {
        const Value* k = dict_key(n);
        if (k->kind == ValueKind::string && k->s == key) return dict_value(n);
    }
    return nullptr;
}

namespace {
static_assert(std::is_trivially_destructible_v<Value>, "arena blocks are freed without running destructors");
}

void ValueArena::FreeBlock::operator()(void* p) const {
    if (mapped) ::munmap(p, mapped);
    else std::free(p);
}

ValueArena::Block ValueArena::new_block(size_t& bytes) {
    if (bytes < k_huge_page / 4) {
        void* p = std::malloc(bytes);
        if (!p) throw std::bad_alloc();
        return Block(p, FreeBlock{0});
    }
    // Map one huge page more than needed and unmap what lies outside the aligned range. The caller
    // gets the whole rounded size: a huge page is faulted in (and paid for) whole.
    size_t size = (bytes + k_huge_page - 1) / k_huge_page * k_huge_page;
    void* map = ::mmap(nullptr, size + k_huge_page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) throw std::bad_alloc();
    uintptr_t at = reinterpret_cast<uintptr_t>(map), aligned = (at + k_huge_page - 1) / k_huge_page * k_huge_page;
    if (aligned > at) ::munmap(map, aligned - at);
    if (aligned + size < at + size + k_huge_page) ::munmap(reinterpret_cast<void*>(aligned + size), at + k_huge_page - aligned);
    void* p = reinterpret_cast<void*>(aligned);
    advise_huge_pages(p, size);
    bytes = size;
    return Block(p, FreeBlock{size});
}

namespace {
// Writes to every page of a fresh mapping, so that later writes find it there.
void fault_in(void* p, size_t bytes) {
#ifdef MADV_POPULATE_WRITE
    if (::madvise(p, bytes, MADV_POPULATE_WRITE) == 0) return;
#endif
    for (size_t at = 0; at < bytes; at += 4096) static_cast<volatile char*>(p)[at] = 0;
}
}  // namespace

// The next huge block, made on the other core: on the bench VM a fresh 2 MiB page costs 2–3 ms to
// fault in, more than the arena takes to fill it with values.
class ValueArena::Ahead {
public:
    Ahead() : m_thread([this] { run(); }) {}
    Ahead(const Ahead&) = delete;
    Ahead& operator=(const Ahead&) = delete;
    ~Ahead() {
        {
            std::lock_guard<std::mutex> lock(m_mutex);
            m_stop = true;
        }
        m_wake.notify_one();
        m_thread.join();
    }
    // The block made ahead (empty if it is not done yet), and the next one begun.
    Block take() {
        Block out;
        {
            std::lock_guard<std::mutex> lock(m_mutex);
            out = std::move(m_ready);
            m_wanted = true;
        }
        m_wake.notify_one();
        return out;
    }

private:
    void run() {
        std::unique_lock<std::mutex> lock(m_mutex);
        while (true) {
            m_wake.wait(lock, [this] { return m_stop || (m_wanted && !m_ready); });
            if (m_stop) return;
            m_wanted = false;
            lock.unlock();
            Block b;
            try {
                size_t bytes = k_huge_page;
                b = new_block(bytes);
                fault_in(b.get(), bytes);
            } catch (const std::bad_alloc&) {
            }
            lock.lock();
            if (!b) return;  // nothing to map ahead: the arena maps its own blocks
            m_ready = std::move(b);
        }
    }

    std::mutex m_mutex;
    std::condition_variable m_wake;
    bool m_stop = false;
    bool m_wanted = true;
    Block m_ready;
    std::thread m_thread;  // last: it starts once the rest is built
};

ValueArena::ValueArena(uint64_t max_values) : m_max(max_values) {
    for (int n = 0; n < k_small_ints; ++n) m_small_ints[n] = make_constant(ValueKind::integer, n);
}

ValueArena::~ValueArena() = default;

void ValueArena::clear() {
    pause();
    m_blocks.clear();
    m_value_next = nullptr;
    m_value_left = m_value_block = 0;
    m_slot_next = nullptr;
    m_slot_left = m_slot_block = 0;
    m_texts.clear();
    m_free = nullptr;
    std::fill(std::begin(m_free_slots), std::end(m_free_slots), nullptr);
    m_count = 0;
}

ValueArena::Block ValueArena::block(size_t& bytes) {
    if (bytes < k_huge_page / 4 || bytes > k_huge_page) return new_block(bytes);
    if (m_ahead) {
        if (Block b = m_ahead->take()) {
            bytes = k_huge_page;
            return b;
        }
    } else if (!m_no_ahead) {
        try {
            m_ahead = std::make_unique<Ahead>();
        } catch (const std::system_error&) {
            m_no_ahead = true;  // no thread to be had: this one maps every block
        }
    }
    return new_block(bytes);
}

Value* ValueArena::make(ValueKind kind, uint64_t offset) {
    if (m_free) {
        Value* v = m_free;
        m_free = v->args;
        *v = Value();
        v->kind = kind;
        v->offset = offset;
        return v;
    }
    if (m_count >= m_max)
        throw Error(ErrorKind::limit, "",
                    "pickle builds more than " + std::to_string(m_max) + " values", offset);
    if (m_value_left == 0) {
        // 8 KiB first (a small pickle), doubling to 2 MiB.
        m_value_block = m_value_block ? std::min(m_value_block * 2, k_huge_page) : 8192;
        size_t bytes = m_value_block;
        m_blocks.push_back(block(bytes));
        m_value_next = static_cast<Value*>(m_blocks.back().get());
        m_value_left = bytes / sizeof(Value);
    }
    Value* v = new (m_value_next++) Value();
    --m_value_left;
    ++m_count;
    v->kind = kind;
    v->offset = offset;
    return v;
}

Value** ValueArena::slots(size_t n) {
    constexpr size_t k_max_block = k_huge_page / sizeof(Value*);
    if (n < k_slot_classes && m_free_slots[n]) {
        Value** out = m_free_slots[n];
        m_free_slots[n] = reinterpret_cast<Value**>(out[0]);
        return out;
    }
    if (n > m_slot_left) {
        if (n > k_max_block / 4) {  // a long list gets a block of its own
            size_t bytes = n * sizeof(Value*);
            m_blocks.push_back(new_block(bytes));
            return static_cast<Value**>(m_blocks.back().get());
        }
        m_slot_block = m_slot_block ? std::min(m_slot_block * 2, k_huge_page) : 2048;
        size_t bytes = m_slot_block;
        m_blocks.push_back(block(bytes));
        m_slot_next = static_cast<Value**>(m_blocks.back().get());
        m_slot_left = bytes / sizeof(Value*);
    }
    Value** out = m_slot_next;
    m_slot_next += n;
    m_slot_left -= n;
    return out;
}

void ValueArena::grow(ValueList& list, size_t more) {
    auto [old, cap] = move_to_bigger(list, more);
    release(old, cap);
}

std::pair<Value**, size_t> ValueArena::move_to_bigger(ValueList& list, size_t more) {
    constexpr uint64_t k_max = UINT32_MAX;
    uint64_t need = static_cast<uint64_t>(list.m_size) + more;
    if (need > k_max)
        throw Error(ErrorKind::limit, "", "a container holds more than " + std::to_string(k_max) + " items");
    uint64_t cap = std::min(std::max({need, static_cast<uint64_t>(list.m_cap) * 2, uint64_t{4}}), k_max);
    Value** data = slots(static_cast<size_t>(cap));
    if (list.m_size) std::memcpy(data, list.m_data, list.m_size * sizeof(Value*));
    std::pair<Value**, size_t> old{list.m_data, list.m_cap};
    list.m_data = data;
    list.m_cap = static_cast<uint32_t>(cap);
    return old;
}

void ValueArena::release(Value** slots, size_t n) {
    // A big list's old slots are never handed out again (only small ones are, by the free lists):
    // their whole pages go back to the kernel. A root dict of 100,000 tensors leaves 1.5 MiB so.
    constexpr uintptr_t page = 4096;
    if (n * sizeof(Value*) < 16 * page) return;
    uintptr_t begin = (reinterpret_cast<uintptr_t>(slots) + page - 1) & ~(page - 1);
    uintptr_t end = (reinterpret_cast<uintptr_t>(slots + n)) & ~(page - 1);
    if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

void ValueArena::pause() { m_ahead.reset(); }

void ValueArena::append(ValueList& list, ValueSpan values) {
    if (values.empty()) return;
    std::pair<Value**, size_t> old{nullptr, 0};
    if (list.m_cap - list.m_size < values.size()) old = move_to_bigger(list, values.size());
    std::memcpy(list.m_data + list.m_size, values.data, values.size() * sizeof(Value*));
    list.m_size += static_cast<uint32_t>(values.size());
    release(old.first, old.second);  // after the copy: `values` may be the list's own
}

ValueList ValueArena::list_of(ValueSpan values) {
    // Exactly its size: a tuple never grows (a list appended to later moves to a bigger block).
    ValueList out;
    if (values.empty()) return out;
    if (values.size() > UINT32_MAX)
        throw Error(ErrorKind::limit, "", "a container holds more than " + std::to_string(UINT32_MAX) + " items");
    out.m_data = slots(values.size());
    std::memcpy(out.m_data, values.data, values.size() * sizeof(Value*));
    out.m_size = out.m_cap = static_cast<uint32_t>(values.size());
    return out;
}

std::string_view ValueArena::own(std::string_view text) { return m_texts.keep(text); }

void ValueArena::take_back(Value* v, int levels) {
    if (v->shared) return;
    switch (v->kind) {
        case ValueKind::tuple:
        case ValueKind::list:
            if (levels > 1)
                for (Value* item : v->items) take_back(item, levels - 1);
            // Its slots too: no other list shares them (a list is copied only into a fresh one
            // while a pickle runs), and a small one is handed out again for a list of its size.
            if (v->items.m_cap && v->items.m_cap < k_slot_classes) {
                Value** data = v->items.m_data;
                data[0] = reinterpret_cast<Value*>(m_free_slots[v->items.m_cap]);
                m_free_slots[v->items.m_cap] = data;
            }
            v->items = ValueList();
            break;
        case ValueKind::dict:
            if (!v->entries.empty() || v->state) return;  // the VM indexes a dict's keys by its address
            break;
        case ValueKind::integer: case ValueKind::big_integer: case ValueKind::floating: case ValueKind::complex:
        case ValueKind::string: case ValueKind::bytes:
        case ValueKind::storage:  // a value made for one load of a storage (TorchHooks), unless shared
            break;
        default: return;  // a hook may hold on to these (a tensor's value, a global, an object)
    }
    v->kind = ValueKind::none;
    v->shared = true;  // taken back once only, whatever else still names it by mistake
    v->args = m_free;
    m_free = v;
}

Value* ValueArena::integer(int64_t v, uint64_t offset) {
    if (v >= 0 && v < k_small_ints) return &m_small_ints[v];
    Value* out = make(ValueKind::integer, offset);
    out->i = v;
    return out;
}

std::string repr_float(double d) {
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
    char buf[40];
    for (int p = 1; p <= 17; ++p) {
        std::snprintf(buf, sizeof buf, "%.*g", p, d);
        if (std::strtod(buf, nullptr) == d) break;
    }
    std::string s = buf;
    if (s.find_first_of(".e") == std::string::npos) s += ".0";
    return s;
}

std::string big_integer_decimal(std::string_view le) {
    if (le.empty()) return "0";
    bool negative = static_cast<uint8_t>(le.back()) & 0x80;
    std::vector<uint8_t> mag(le.begin(), le.end());
    if (negative) {  // two's complement → magnitude
        for (auto& b : mag) b = static_cast<uint8_t>(~b);
        for (auto& b : mag) {
            if (++b != 0) break;
        }
    }
    std::string digits;
    // Repeated division by 10 of a little-endian base-256 number.
    while (true) {
        bool zero = true;
        for (uint8_t b : mag) zero = zero && b == 0;
        if (zero) break;
        unsigned rem = 0;
        for (size_t i = mag.size(); i-- > 0;) {
            unsigned cur = (rem << 8) | mag[i];
            mag[i] = static_cast<uint8_t>(cur / 10);
            rem = cur % 10;
        }
        digits.push_back(static_cast<char>('0' + rem));
    }
    if (digits.empty()) digits = "0";
    if (negative) digits.push_back('-');
    return {digits.rbegin(), digits.rend()};
}

std::string global_name(const Value* v) {
    if (!v) return "";
    if (v->kind == ValueKind::object) return global_name(v->callable);
    if (v->kind != ValueKind::global) return "";
    std::string out(v->s);
    out += '.';
    out += v->s2;
    return out;
}

std::string type_name(const Value* v) {
    switch (v->kind) {
        case ValueKind::none: return "None";
        case ValueKind::boolean: return "bool";
        case ValueKind::integer:
        case ValueKind::big_integer: return "int";
        case ValueKind::floating: return "float";
        case ValueKind::complex: return "complex";
        case ValueKind::string: return "str";
        case ValueKind::bytes: return "bytes";
        case ValueKind::bytearray: return "bytearray";
        case ValueKind::tuple: return v->s2.empty() ? "tuple" : std::string(v->s2);
        case ValueKind::list: return "list";
        case ValueKind::dict: return v->s2.empty() ? "dict" : std::string(v->s2);
        case ValueKind::set: return "set";
        case ValueKind::frozenset: return "frozenset";
        case ValueKind::global: return "global";
        case ValueKind::object: {
            std::string n = global_name(v->callable);
            return n.empty() ? "object" : n;
        }
        case ValueKind::tensor: return "tensor";
        case ValueKind::storage: return "storage";
        case ValueKind::dtype: return "torch.dtype";
        case ValueKind::device: return "torch.device";
    }
    return "?";
}

namespace {

void quote(std::string& out, std::string_view s, bool bytes) {
    char q = (s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos)
                 ? '"'
                 : '\'';
    out += q;
    for (unsigned char c : s) {
        if (c == '\\' || c == static_cast<unsigned char>(q)) {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\t') {
            out += "\\t";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c < 0x20 || c == 0x7f || (bytes && c >= 0x80)) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
        } else {
            out += static_cast<char>(c);
        }
    }
    out += q;
}

// numpy.core.multiarray.scalar(dtype('f8'), b'...') → "numpy.float64(0.5)"; empty if not decodable.
std::string numpy_scalar(const Value* v) {
    std::string cls = global_name(v->callable);
    if (cls != "numpy.core.multiarray.scalar" && cls != "numpy._core.multiarray.scalar") return "";
    if (!v->args || v->args->items.size() < 2) return "";
    const Value* dt = v->args->items[0];
    const Value* data = v->args->items[1];
    if (dt->kind != ValueKind::object || !dt->args || dt->args->items.empty() ||
        dt->args->items[0]->kind != ValueKind::string || data->kind != ValueKind::bytes)
        return "";
    std::string_view code = dt->args->items[0]->s;
    if (dt->state && dt->state->kind == ValueKind::tuple && dt->state->items.size() > 1 &&
        dt->state->items[1]->kind == ValueKind::string && dt->state->items[1]->s == ">")
        return "";  // big-endian scalars are rare enough to show raw
    std::string_view b = data->s;
    auto load = [&](auto zero) {
        decltype(zero) x{};
        if (b.size() == sizeof x) std::memcpy(&x, b.data(), sizeof x);
        return x;
    };
    std::string body;
    if (code == "f8" && b.size() == 8) body = "numpy.float64(" + repr_float(load(double{})) + ")";
    else if (code == "f4" && b.size() == 4) body = "numpy.float32(" + repr_float(load(float{})) + ")";
    else if (code == "i8" && b.size() == 8) body = "numpy.int64(" + std::to_string(load(int64_t{})) + ")";
    else if (code == "i4" && b.size() == 4) body = "numpy.int32(" + std::to_string(load(int32_t{})) + ")";
    else if (code == "u8" && b.size() == 8) body = "numpy.uint64(" + std::to_string(load(uint64_t{})) + ")";
    else if (code == "b1" && b.size() == 1) body = std::string("numpy.bool_(") + (b[0] ? "True" : "False") + ")";
    return body;
}

class Repr {
public:
    Repr(size_t max_chars, int max_depth) : m_max(max_chars), m_max_depth(max_depth) {}

    void value(const Value* v, int depth) {
        if (full()) return;
        if (depth > m_max_depth || on_path(v)) {
            m_out += "…";
            return;
        }
        m_path.push_back(v);
        body(v, depth);
        m_path.pop_back();
    }
    std::string take() {
        if (m_out.size() > m_max) {
            size_t cut = m_max;
            while (cut > 0 && (static_cast<unsigned char>(m_out[cut]) & 0xc0) == 0x80) --cut;
            m_out.resize(cut);
            m_out += "…";
        }
        return std::move(m_out);
    }

private:
    bool full() const { return m_out.size() > m_max; }
    bool on_path(const Value* v) const {
        for (const Value* p : m_path)
            if (p == v) return true;
        return false;
    }
    void seq(const ValueList& items, int depth) {
        for (size_t n = 0; n < items.size() && !full(); ++n) {
            if (n) m_out += ", ";
            value(items[n], depth + 1);
        }
    }
    void pairs(const ValueList& entries, int depth) {
        for (size_t n = 0; n + 1 < entries.size() && !full(); n += 2) {
            if (n) m_out += ", ";
            value(entries[n], depth + 1);
            m_out += ": ";
            value(entries[n + 1], depth + 1);
        }
    }
    void body(const Value* v, int depth) {
        switch (v->kind) {
            case ValueKind::none: m_out += "None"; return;
            case ValueKind::boolean: m_out += v->i ? "True" : "False"; return;
            case ValueKind::integer: m_out += std::to_string(v->i); return;
            case ValueKind::big_integer:
                m_out += v->s.size() > 4096 ? "<int of " + std::to_string(v->s.size()) + " bytes>"
                                            : big_integer_decimal(v->s);
                return;
            case ValueKind::floating: m_out += repr_float(v->f); return;
            case ValueKind::complex:
                m_out += "(" + repr_float(v->f) + (v->f2 < 0 ? "" : "+") + repr_float(v->f2) + "j)";
                return;
            case ValueKind::string: quote(m_out, v->s, false); return;
            case ValueKind::bytes: m_out += 'b'; quote(m_out, v->s, true); return;
            case ValueKind::bytearray:
                m_out += "bytearray(b";
                quote(m_out, v->s, true);
                m_out += ')';
                return;
            case ValueKind::tuple:
                if (!v->s2.empty()) {
                    m_out += std::string(v->s2) + "([";
                    seq(v->items, depth);
                    m_out += "])";
                    return;
                }
                m_out += '(';
                seq(v->items, depth);
                if (v->items.size() == 1) m_out += ',';
                m_out += ')';
                return;
            case ValueKind::list: m_out += '['; seq(v->items, depth); m_out += ']'; return;
            case ValueKind::dict:
                if (!v->s2.empty()) m_out += v->s2 == "collections.OrderedDict" ? "OrderedDict(" : std::string(v->s2) + "(";
                m_out += '{';
                pairs(v->entries, depth);
                m_out += '}';
                if (!v->s2.empty()) m_out += ')';
                return;
            case ValueKind::set:
            case ValueKind::frozenset:
                if (v->items.empty()) {
                    m_out += v->kind == ValueKind::set ? "set()" : "frozenset()";
                    return;
                }
                if (v->kind == ValueKind::frozenset) m_out += "frozenset(";
                m_out += '{';
                seq(v->items, depth);
                m_out += '}';
                if (v->kind == ValueKind::frozenset) m_out += ')';
                return;
            case ValueKind::global: m_out += global_name(v); return;
            case ValueKind::object: object(v, depth); return;
            case ValueKind::tensor: m_out += "tensor(" + std::string(v->s) + ")"; return;
            case ValueKind::storage:  // "float32, 16 elements" and the key, or a legacy view's own text
                m_out.append("storage(").append(v->s);
                if (!v->s2.empty()) m_out.append(", key ").append(v->s2);
                m_out += ')';
                return;
            case ValueKind::dtype: m_out += "torch." + std::string(v->s2); return;
            case ValueKind::device:
                m_out += "device(type='" + std::string(v->s) + "'";
                if (v->i >= 0) m_out += ", index=" + std::to_string(v->i);
                m_out += ')';
                return;
        }
    }
    void object(const Value* v, int depth) {
        std::string np = numpy_scalar(v);
        if (!np.empty()) {
            m_out += np;
            return;
        }
        m_out += global_name(v->callable).empty() ? "object" : global_name(v->callable);
        m_out += '(';
        bool first = true;
        if (v->args && (v->args->kind == ValueKind::tuple) && !v->args->items.empty()) {
            seq(v->args->items, depth);
            first = false;
        }
        // Attribute state (a dict of str keys), shown as keyword arguments, like argparse.Namespace.
        const Value* st = v->state;
        if (st && st->kind == ValueKind::tuple && st->items.size() == 2 &&
            st->items[0]->kind == ValueKind::dict)
            st = st->items[0];  // (dict, slots) state
        if (st && st->kind == ValueKind::dict) {
            for (size_t n = 0; n < st->dict_size() && !full(); ++n) {
                if (!first) m_out += ", ";
                first = false;
                const Value* k = st->dict_key(n);
                if (k->kind == ValueKind::string) m_out += std::string(k->s);
                else value(k, depth + 1);
                m_out += '=';
                value(st->dict_value(n), depth + 1);
            }
        } else if (st && st->kind != ValueKind::none) {
            if (!first) m_out += ", ";
            m_out += "state=";
            value(st, depth + 1);
        }
        if (!v->items.empty()) {
            m_out += first ? "items=[" : ", items=[";
            seq(v->items, depth);
            m_out += ']';
            first = false;
        }
        if (!v->entries.empty()) {
            m_out += first ? "{" : ", {";
            pairs(v->entries, depth);
            m_out += '}';
        }
        m_out += ')';
    }

    size_t m_max;
    int m_max_depth;
    std::string m_out;
    std::vector<const Value*> m_path;
};

}  // namespace

std::string repr(const Value* v, size_t max_chars, int max_depth) {
    Repr r(max_chars, max_depth);
    r.value(v, 0);
    return r.take();
}

}  // namespace ckpt
