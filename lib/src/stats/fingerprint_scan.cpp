// The parallel scan behind verify and fingerprints (their JSON: fingerprint_json.cpp).
#include <algorithm>
#include <atomic>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>

#include "ckpt/error.hpp"
#include "ckpt/fingerprint.hpp"
#include "model/keys.hpp"
#include "io/mapped_file.hpp"
#include "io/zip.hpp"
#include "stats/tensor_stats.hpp"
#include "base/huge_pages.hpp"

namespace ckpt {

using detail::stats_over;
using detail::stats_of_file_range;

namespace {
// The common case of a state dict: one contiguous tensor that is its whole storage record.
bool whole_record(const TensorInfo& t, ByteView record) {
    return t.contiguous() && t.storage_offset == 0 && t.nbytes() == record.size;
}
}  // namespace

// ---- the scan ----

namespace {

struct Selected {
    std::string_view key;  // the checkpoint's own text
    size_t tensor;
};

// The tensors that view one record: the first in place (a state dict's usual case; a vector of one
// element was an allocation a tensor), any others on the heap.
class Viewers {
public:
    bool empty() const { return m_first == k_none; }
    size_t size() const { return empty() ? 0 : 1 + m_rest.size(); }
    size_t operator[](size_t n) const { return n == 0 ? m_first : m_rest[n - 1]; }
    void push_back(size_t t) {
        if (empty()) m_first = t;
        else m_rest.push_back(t);
    }
    struct Iterator {
        const Viewers* of;
        size_t n;
        size_t operator*() const { return (*of)[n]; }
        Iterator& operator++() { return ++n, *this; }
        bool operator!=(const Iterator& o) const { return n != o.n; }
    };
    Iterator begin() const { return {this, 0}; }
    Iterator end() const { return {this, size()}; }

private:
    static constexpr size_t k_none = ~size_t{0};
    size_t m_first = k_none;
    std::vector<size_t> m_rest;
};

struct WorkItem {
    size_t record = 0;  // index into Checkpoint::records
    Viewers tensors;    // unique tensor indices viewing this record's storage
    uint64_t bytes = 0; // what it reads
};

// A record that is one contiguous tensor stored as it is in its file (a state dict's usual case) is
// read with pread rather than through the mapping: faulting 1 GiB of cached pages in and releasing
// them again costs 0.6 s here, pread into a buffer that stays in L2 0.19 s. Below 256 KiB the
// mapping wins (many small records share a page, and a pread is a system call each).
constexpr size_t k_read_buffer = 1u << 20;
constexpr uint64_t k_read_min = 256u << 10;

// Where in its file the tensor's bytes start, when it is to be read so.
std::optional<uint64_t> file_read_offset(const Checkpoint& c, const WorkItem& w, bool crc_here) {
    if (w.tensors.size() != 1) return std::nullopt;
    const TensorInfo& t = c.tensors()[w.tensors[0]];
    if (!t.contiguous() || t.nbytes() < k_read_min) return std::nullopt;
    if (crc_here && !(t.storage_offset == 0 && t.nbytes() == c.records()[w.record].size))
        return std::nullopt;  // the CRC is of the whole record
    std::optional<uint64_t> at = c.record_file_offset(w.record);  // none for a DEFLATE record
    if (at) *at += static_cast<uint64_t>(t.storage_offset) * dtype_size(t.dtype);
    return at;
}

// Small records read through the mapping share pages, which releasing each record's own whole pages
// never frees: 100,000 records of 64 bytes left 18 MiB resident. Read in file order (records of one
// size keep it), each worker gives back the pages more than 1 MiB behind what it reads now. A page
// another worker still reads comes back from the page cache: slower, never wrong (the mapping is of
// the file, unmodified).
class Trail {
public:
    void read(const MappedFile& file, ByteView v) {
        ByteView all = file.view();
        if (v.data < all.data || v.data >= all.data + all.size) return;  // not the mapping's (an inflated copy)
        uint64_t at = static_cast<uint64_t>(v.data - all.data);
        if (&file != m_file || at < m_behind.given_back()) {  // another file, or back: start again from here
            m_file = &file;
            m_behind = PagesBehind(&file, all, at);
        } else {
            m_behind.at(at);
        }
    }

private:
    const MappedFile* m_file = nullptr;
    PagesBehind m_behind{nullptr, {}};
};

}  // namespace

static Fingerprint fingerprint_unnamed(const Checkpoint& c, const FingerprintOptions& o) {
    if (c.byteorder() == "big")
        throw Error(ErrorKind::unsupported, c.path(), "a big-endian checkpoint: its tensor values are not read (inspect and diff-keys work)");
    Fingerprint f;
    f.file = c.path();
    f.file_size = c.file_size();
    f.scope = o.all ? "all" : "state_dict";

    std::vector<Selected> selected;
    selected.reserve(o.all ? c.tensors().size() : c.state_dict().entries.size());
    if (o.all) {
        for (const Entry& e : c.entries())
            if (e.tensor) selected.push_back({e.key, *e.tensor});
    } else {
        for (const auto& e : c.state_dict().entries)
            if (auto t = c.entries()[e.entry].tensor) selected.push_back({e.name, *t});
    }
    if (!o.key_globs.empty() || !o.ignore_globs.empty())
        selected.erase(std::remove_if(selected.begin(), selected.end(),
                                      [&](const Selected& s) { return !key_selected(o.key_globs, o.ignore_globs, s.key); }),
                       selected.end());

    // Which tensors can be read: record present, long enough, view inside it.
    const auto& storages = c.storages();
    const auto& tensors = c.tensors();
    // A sparse or nested tensor is read through the stored tensors it is made of (its leaves, each
    // a strided view of its storage): a sparse tensor's indices and values, a nested tensor's components.
    auto leaves = [&](const TensorInfo& t) {
        if (t.nested()) return t.extra->components;
        std::vector<size_t> out;
        for (const TensorPart& p : t.extra->parts) out.push_back(p.tensor);
        return out;
    };
    auto view_readable = [&](const TensorInfo& t) {
        const StorageInfo& s = storages[t.storage];
        if (!s.record_present) return false;
        uint64_t cap = s.record_size / dtype_size(t.dtype);
        return t.numel == 0 || static_cast<uint64_t>(t.storage_offset) + t.extent <= cap;
    };
    auto readable = [&](size_t ti) {
        const TensorInfo& t = tensors[ti];
        if (t.strided_view()) return view_readable(t);
        if (t.no_data) return true;  // nothing saved, nothing to read
        if (t.nested() && t.extra->components.empty() && t.numel) return false;
        for (size_t leaf : leaves(t))
            if (!view_readable(tensors[leaf])) return false;
        return true;
    };

    // Tables by position, not hash maps: 100,000 tensors made three maps of 100,000 nodes each.
    constexpr size_t none = ~size_t{0};
    std::vector<size_t> storage_of_record(c.records().size(), none);
    for (size_t i = 0; i < storages.size(); ++i)
        if (auto r = c.storage_record(i); r && storage_of_record[*r] == none) storage_of_record[*r] = i;
    std::vector<size_t> item_of_storage(storages.size(), none);
    std::vector<WorkItem> items;
    items.reserve(c.records().size());
    for (size_t r = 0; r < c.records().size(); ++r) {
        const RecordInfo& e = c.records()[r];
        size_t storage = storage_of_record[r];
        if (storage != none) item_of_storage[storage] = items.size();
        if (o.check_crc || storage != none) items.push_back({r, {}, o.check_crc && e.has_crc ? e.size : 0});
    }
    std::vector<size_t> slot_of_tensor(tensors.size(), none);
    std::vector<TensorStats> slots;
    slots.reserve(selected.size());
    std::vector<size_t> composite;  // read through their leaves, combined once those are read
    // A slot for tensor `ti` (false: it has one already); a strided view's read is handed out.
    auto schedule_view = [&](size_t ti) {
        if (slot_of_tensor[ti] != none) return false;
        slot_of_tensor[ti] = slots.size();
        slots.emplace_back();
        const TensorInfo& t = tensors[ti];
        if (!t.strided_view() || (o.known && o.known(ti, slots.back()))) return true;
        WorkItem& w = items[item_of_storage[t.storage]];
        w.tensors.push_back(ti);
        w.bytes += t.nbytes();
        return true;
    };
    for (const Selected& s : selected) {
        if (slot_of_tensor[s.tensor] != none || !readable(s.tensor) || !schedule_view(s.tensor)) continue;
        const TensorInfo& t = tensors[s.tensor];
        if (t.strided_view() || t.no_data) continue;
        composite.push_back(s.tensor);
        for (size_t leaf : leaves(t)) schedule_view(leaf);
    }
    if (!o.check_crc)  // storage records none of the selected tensors views
        items.erase(std::remove_if(items.begin(), items.end(), [](const WorkItem& w) { return w.tensors.empty(); }),
                    items.end());
    // Largest first, so that one big tensor does not end up alone at the end of the run.
    std::vector<size_t> order(items.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return items[x].bytes > items[y].bytes; });

    std::vector<RecordCrc> crcs(items.size());
    uint64_t total = 0;
    for (const auto& w : items) total += w.bytes;
    std::atomic<size_t> next{0};
    std::mutex progress_lock;
    uint64_t done_bytes = 0, reported = 0;
    std::exception_ptr failure;
    std::atomic<bool> failed{false};
    auto report_progress = [&](uint64_t bytes) {
        if (!o.progress) return;
        std::lock_guard<std::mutex> lock(progress_lock);
        done_bytes += bytes;
        if (done_bytes - reported >= (64u << 20) || done_bytes == total) {
            reported = done_bytes;
            o.progress(done_bytes, total);
        }
    };
    auto worker = [&]() {
        std::vector<uint8_t> buffer;
        // The records' bytes, and their names in the zip's central directory, which each record's
        // local header is checked against (the open gave those pages back: 9 MiB of 100,000
        // records' that would otherwise come back whole).
        Trail trail, names;
        try {
            for (size_t n; (n = next.fetch_add(1)) < order.size();) {
                if (failed) return;
                const WorkItem& w = items[order[n]];
                const RecordInfo& rec = c.records()[w.record];
                bool crc_here = o.check_crc && rec.has_crc;
                names.read(c.record_file(w.record), {reinterpret_cast<const uint8_t*>(rec.name.data()), rec.name.size()});
                if (auto at = file_read_offset(c, w, crc_here)) {
                    const TensorInfo& t = tensors[w.tensors[0]];
                    const MappedFile& file = c.record_file(w.record);
                    uint32_t crc = 0;
                    if (buffer.empty()) buffer.resize(k_read_buffer);
                    slots[slot_of_tensor.at(w.tensors[0])] = stats_of_file_range(
                        t.dtype, file.fd(), *at, t.numel, crc_here ? &crc : nullptr, o.hash_only, buffer, file.path());
                    if (crc_here) crcs[order[n]] = {rec.name, rec.crc32, crc};
                    report_progress(w.bytes);
                    continue;
                }
                RecordData data = c.record_data(w.record);
                ByteView v = data.view();
                if (w.tensors.size() == 1 && crc_here && whole_record(tensors[w.tensors[0]], v)) {
                    uint32_t crc = 0;
                    const TensorInfo& t = tensors[w.tensors[0]];
                    const MappedFile& file = c.record_file(w.record);
                    file.advise_sequential(v);
                    slots[slot_of_tensor.at(w.tensors[0])] =
                        stats_over(t.dtype, v.data, &t, t.numel, &crc, o.hash_only, [&](ByteView done) { file.release(done); });
                    crcs[order[n]] = {rec.name, rec.crc32, crc};
                } else {
                    const MappedFile& file = c.record_file(w.record);
                    if (crc_here) {
                        // A record no tensor reads (the pickle: 13 MiB of 100,000 tensors') leaves
                        // in windows as its CRC is taken, not all at once after it.
                        uint32_t crc = 0;
                        for (uint64_t at = 0; at < v.size; at += k_read_buffer) {
                            ByteView piece = *v.sub(at, std::min<uint64_t>(k_read_buffer, v.size - at));
                            crc = crc32_of(piece, crc);
                            if (w.tensors.empty()) file.release(piece);
                        }
                        crcs[order[n]] = {rec.name, rec.crc32, crc};
                    }
                    // One tensor read once (safetensors, or a view of part of its record): its
                    // pages leave in windows as it goes. readable() checked the bounds.
                    std::function<void(ByteView)> release;
                    if (w.tensors.size() == 1 && !crc_here) release = [&](ByteView done) { file.release(done); };
                    for (size_t ti : w.tensors)
                        slots[slot_of_tensor.at(ti)] =
                            stats_over(tensors[ti].dtype, v.data, &tensors[ti], tensors[ti].numel, nullptr, o.hash_only, release);
                }
                // Done with this record: its pages leave this process (resident memory stays at
                // what the workers read now, whatever the file's size; measured on 1 GiB: 26 MiB
                // instead of 1 GiB, for ~10% more time in TLB shootdowns).
                c.record_file(w.record).release(v);
                trail.read(c.record_file(w.record), v);
                report_progress(w.bytes);
            }
        } catch (...) {
            std::lock_guard<std::mutex> lock(progress_lock);
            if (!failure) failure = std::current_exception();
            failed = true;
        }
    };
    unsigned threads = o.threads ? o.threads : std::max(1u, std::thread::hardware_concurrency());
    threads = static_cast<unsigned>(std::min<size_t>(threads, std::max<size_t>(1, items.size())));
    std::vector<std::thread> pool;
    for (unsigned i = 1; i < threads; ++i) {
        try {
            pool.emplace_back(worker);
        } catch (const std::system_error&) {
            break;  // no more threads to be had (a process limit): fewer workers share the items
        }
    }
    worker();
    for (auto& t : pool) t.join();
    if (failure) std::rethrow_exception(failure);

    // Composite tensors from their leaves.
    for (size_t n = 0; n < composite.size(); ++n) {
        const TensorInfo& t = tensors[composite[n]];
        std::vector<const TensorStats*> values, hashed;
        uint64_t zeros = 0;
        for (size_t leaf : leaves(t)) hashed.push_back(&slots.at(slot_of_tensor[leaf]));  // every leaf has one (readable)
        if (t.nested()) {
            values = hashed;
        } else {  // sparse: the values, and zeros for the elements not stored (as t.to_dense() has them)
            const TensorStats* v = hashed.back();
            size_t vt = t.extra->parts.back().tensor;
            uint64_t per = tensors[vt].numel ? v->count / tensors[vt].numel : 1;  // 2 for complex
            values = {v};
            zeros = t.numel * per > v->count ? t.numel * per - v->count : 0;
        }
        slots[slot_of_tensor[composite[n]]] = detail::combine_stats(values, zeros, hashed);
        if (o.hash_only) {
            TensorStats& st = slots[slot_of_tensor[composite[n]]];
            st = TensorStats{st.count, {}, {}, {}, {}, {}, {}, 0, 0, st.hash};
        }
    }

    // The CRC rows, and then the scan's tables go: the prints are made next, beside the slots.
    if (o.check_crc) {  // items are every record, in directory order; safetensors records have no CRC
        auto has_crc = [&](const WorkItem& w) { return c.records()[w.record].has_crc; };
        f.records.reserve(static_cast<size_t>(std::count_if(items.begin(), items.end(), has_crc)));
        for (size_t i = 0; i < items.size(); ++i)
            if (c.records()[items[i].record].has_crc) f.records.push_back(crcs[i]);
    }
    std::vector<WorkItem>().swap(items);
    std::vector<RecordCrc>().swap(crcs);
    std::vector<size_t>().swap(order);
    std::vector<size_t>().swap(item_of_storage);
    std::vector<size_t>().swap(storage_of_record);

    // Each slot's statistics move into the last print that names its tensor (a tensor at two keys
    // is copied once), not copied into every one: the slots held a second copy of every row.
    std::vector<size_t> last_use(slots.size(), none);
    for (size_t n = 0; n < selected.size(); ++n)
        if (size_t slot = slot_of_tensor[selected[n].tensor]; slot != none) last_use[slot] = n;
    if (!o.take) f.tensors.reserve(selected.size());
    // Slots are handed out in the prints' order (a state dict's slot n is its print n): the pages of
    // those handed on leave as the prints are made, so that the slots and the rows they become are
    // not both whole at once (9.6 MiB for 100,000 tensors). A page given back reads as zeros, a
    // TensorStats of nothing, and no slot behind `handed_on` is read again.
    size_t handed_on = 0, given_back = 0;
    auto give_back_behind = [&](size_t n) {
        while (handed_on < slots.size() && (last_use[handed_on] == none || last_use[handed_on] <= n)) ++handed_on;
        if ((handed_on - given_back) * sizeof(TensorStats) < (1u << 20) && handed_on < slots.size()) return;
        give_back_pages(slots.data() + given_back, (handed_on - given_back) * sizeof(TensorStats));
        given_back = handed_on;
    };
    for (size_t n = 0; n < selected.size(); ++n) {
        const Selected& s = selected[n];
        TensorPrint p;
        p.key = s.key;
        const TensorInfo& t = tensors[s.tensor];
        p.dtype = std::string(dtype_name(t.dtype));
        p.shape = t.shape;
        size_t slot = slot_of_tensor[s.tensor];
        p.readable = slot != none;
        if (p.readable) p.stats = last_use[slot] == n ? std::move(slots[slot]) : slots[slot];
        if (o.take) o.take(std::move(p));
        else f.tensors.push_back(std::move(p));
        give_back_behind(n);
    }
    return f;
}

Fingerprint fingerprint(const Checkpoint& c, const FingerprintOptions& o) {
    return naming_file(c.path(), [&] { return fingerprint_unnamed(c, o); });
}

}  // namespace ckpt
