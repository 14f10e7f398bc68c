// Values and their arena: blocks that never move, list slots, recycling, the block mapped ahead
// (the text of values is value_text.cpp).
#include "ckpt/value.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
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
        if (k->kind == ValueKind::string && k->s() == key) return dict_value(n);
    }
    return nullptr;
}

namespace {
static_assert(std::is_trivially_destructible_v<Value>, "arena blocks are freed without running destructors");
static_assert(sizeof(Value) == 64, "a value is 64 bytes (docs/performance.md, fifth step)");
static_assert(sizeof(Value) >= sizeof(ValueList) * 2, "an object's lists take a value's room");

[[noreturn]] void no_room(const Value* v, const char* what) {
    throw std::logic_error(std::string("a ") + type_name(v) + " holds no " + what + " (at byte " + std::to_string(v->offset) + ")");
}
}  // namespace

void Value::set_i(int64_t v) {
    if (!holds_number()) no_room(this, "integer");
    m.text.n.i = v;
}
void Value::set_f(double v) {
    if (kind != ValueKind::floating && kind != ValueKind::complex) no_room(this, "float");
    m.text.n.f = v;
}
double Value::f2() const {
    double v = 0;
    if (kind == ValueKind::complex) std::memcpy(&v, &m.text.s, sizeof v);
    return v;
}
void Value::set_f2(double v) {
    if (kind != ValueKind::complex) no_room(this, "imaginary part");
    std::memcpy(static_cast<void*>(&m.text.s), &v, sizeof v);  // a complex holds no text: its room holds the imaginary part
}
void Value::set_s(std::string_view v) {
    if (!holds_text()) no_room(this, "text");
    m.text.s = v;
}

void Value::set_callable(Value* v) {
    if (kind != ValueKind::object) no_room(this, "callable");
    m.obj.callable = v;
}
void Value::set_args(Value* v) {
    if (kind != ValueKind::object) no_room(this, "arguments");
    m.obj.args = v;
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
        m_free = v->state;
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
        // Doubling from 2 KiB, and never smaller than the request (256 slots would not hold a
        // first tuple of 300 items).
        m_slot_block = m_slot_block ? std::min(m_slot_block * 2, k_huge_page) : 2048;
        size_t bytes = std::max(m_slot_block, n * sizeof(Value*));
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
    if (n * sizeof(Value*) < 16 * 4096) return;
    give_back_pages(slots, n * sizeof(Value*));
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

void ValueArena::set_items(Value* v, ValueSpan values) {
    // Exactly its size: a tuple never grows (a list appended to later moves to a bigger block).
    if (!v->holds_list() || v->kind == ValueKind::dict || v->m.list.m_size)
        throw std::logic_error("set_items on a " + type_name(v) + " that holds items already, or none");
    if (values.empty()) return;
    if (values.size() > UINT32_MAX)
        throw Error(ErrorKind::limit, "", "a container holds more than " + std::to_string(UINT32_MAX) + " items");
    ValueList& out = v->m.list;
    out.m_data = slots(values.size());
    std::memcpy(out.m_data, values.data, values.size() * sizeof(Value*));
    out.m_size = out.m_cap = static_cast<uint32_t>(values.size());
}

Value* ValueArena::copy_shell(const Value* v) {
    Value* n = make(v->kind, v->offset);
    n->how = v->how;
    n->depth = v->depth;
    if (v->holds_number()) n->m.text.n.i = v->m.text.n.i;
    if (v->kind == ValueKind::floating || v->kind == ValueKind::complex) n->m.text = v->m.text;  // f, f2
    if (v->holds_text() && !v->m.text.s.empty()) n->set_s(own(v->s()));
    if (!v->s2.empty()) n->s2 = own(v->s2);
    return n;
}

Value::Lists& ValueArena::lists_of(Value* v) {
    Value::Lists*& lists = v->kind == ValueKind::object ? v->m.obj.lists : v->m.text.n.lists;
    if (!lists) {
        // A value's room holds them (an object made with APPENDS or SETITEMS is rare).
        Value* room = make(ValueKind::none, v->offset);
        lists = new (static_cast<void*>(room)) Value::Lists{};
    }
    return *lists;
}

ValueList& ValueArena::items_room(Value* v) {
    if (v->holds_list() && v->kind != ValueKind::dict) return v->m.list;
    if (v->kind == ValueKind::object || v->kind == ValueKind::global) return lists_of(v).items;
    throw std::logic_error("a " + type_name(v) + " holds no items (at byte " + std::to_string(v->offset) + ")");
}

ValueList& ValueArena::entries_room(Value* v) {
    if (v->kind == ValueKind::dict) return v->m.list;
    if (v->kind == ValueKind::object || v->kind == ValueKind::global) return lists_of(v).entries;
    throw std::logic_error("a " + type_name(v) + " holds no entries (at byte " + std::to_string(v->offset) + ")");
}

std::string_view ValueArena::own(std::string_view text) { return m_texts.keep(text); }

void ValueArena::take_back(Value* v, int levels) {
    if (v->shared) return;
    switch (v->kind) {
        case ValueKind::tuple:
        case ValueKind::list:
            if (levels > 1)
                for (Value* item : v->items()) take_back(item, levels - 1);
            // Its slots too: no other list shares them (a list is copied only into a fresh one
            // while a pickle runs), and a small one is handed out again for a list of its size.
            if (v->m.list.m_cap && v->m.list.m_cap < k_slot_classes) {
                Value** data = v->m.list.m_data;
                data[0] = reinterpret_cast<Value*>(m_free_slots[v->m.list.m_cap]);
                m_free_slots[v->m.list.m_cap] = data;
            }
            break;
        case ValueKind::dict:
            if (!v->entries().empty() || v->state) return;  // the VM indexes a dict's keys by its address
            break;
        case ValueKind::integer: case ValueKind::big_integer: case ValueKind::floating: case ValueKind::complex:
        case ValueKind::string: case ValueKind::bytes:
        case ValueKind::storage:  // a value made for one load of a storage (TorchHooks), unless shared
            break;
        default: return;  // a hook may hold on to these (a tensor's value, a global, an object)
    }
    *v = Value();
    v->shared = true;  // taken back once only, whatever else still names it by mistake
    v->state = m_free;
    m_free = v;
}

Value* ValueArena::integer(int64_t v, uint64_t offset) {
    if (v >= 0 && v < k_small_ints) return &m_small_ints[v];
    Value* out = make(ValueKind::integer, offset);
    out->set_i(v);
    return out;
}

}  // namespace ckpt
