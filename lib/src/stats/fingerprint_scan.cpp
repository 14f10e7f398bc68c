// The parallel scan behind verify and fingerprints, and the fingerprint JSON.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <unordered_map>

#include "ckpt/error.hpp"
#include "ckpt/fingerprint.hpp"
#include "model/keys.hpp"
#include "io/mapped_file.hpp"
#include "ckpt/report.hpp"
#include "io/json.hpp"
#include "io/zip.hpp"
#include "stats/tensor_stats.hpp"

namespace ckpt {

using detail::stats_over;
using detail::stats_of_file_range;

namespace {
constexpr double k_inf = std::numeric_limits<double>::infinity();
}  // namespace

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

struct WorkItem {
    size_t record = 0;                 // index into Checkpoint::records
    std::vector<size_t> tensors;  // unique tensor indices viewing this record's storage
    uint64_t bytes = 0;           // what it reads
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
        constexpr uintptr_t k_lag = 1u << 20, k_step = 1u << 20;
        auto at = reinterpret_cast<uintptr_t>(v.data);
        if (&file != m_file || at < m_from) {  // another file, or back: start again from here
            m_file = &file;
            m_from = at;
            return;
        }
        if (at - m_from < k_lag + k_step) return;
        file.release({reinterpret_cast<const uint8_t*>(m_from), at - k_lag - m_from});
        m_from = at - k_lag;
    }

private:
    const MappedFile* m_file = nullptr;
    uintptr_t m_from = 0;
};

}  // namespace

Fingerprint fingerprint(const Checkpoint& c, const FingerprintOptions& o) {
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
    if (!o.key_globs.empty())
        selected.erase(std::remove_if(selected.begin(), selected.end(),
                                      [&](const Selected& s) { return !any_glob_matches(o.key_globs, s.key); }),
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
        if (auto r = c.record_index(storages[i].record); r && storage_of_record[*r] == none) storage_of_record[*r] = i;
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
        Trail trail;
        try {
            for (size_t n; (n = next.fetch_add(1)) < order.size();) {
                if (failed) return;
                const WorkItem& w = items[order[n]];
                const RecordInfo& rec = c.records()[w.record];
                bool crc_here = o.check_crc && rec.has_crc;
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
                    if (crc_here) crcs[order[n]] = {rec.name, rec.crc32, crc32_of(v)};
                    // One tensor read once (safetensors, or a view of part of its record): its
                    // pages leave in windows as it goes. readable() checked the bounds.
                    const MappedFile& file = c.record_file(w.record);
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

    // Each slot's statistics move into the last print that names its tensor (a tensor at two keys
    // is copied once), not copied into every one: the slots held a second copy of every row.
    std::vector<size_t> last_use(slots.size(), none);
    for (size_t n = 0; n < selected.size(); ++n)
        if (size_t slot = slot_of_tensor[selected[n].tensor]; slot != none) last_use[slot] = n;
    if (!o.take) f.tensors.reserve(selected.size());
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
    }
    if (o.check_crc) {  // items are every record, in directory order; safetensors records have no CRC
        auto has_crc = [&](const WorkItem& w) { return c.records()[w.record].has_crc; };
        f.records.reserve(static_cast<size_t>(std::count_if(items.begin(), items.end(), has_crc)));
        for (size_t i = 0; i < items.size(); ++i)
            if (c.records()[items[i].record].has_crc) f.records.push_back(crcs[i]);
    }
    return f;
}

// ---- JSON ----

namespace {

nlohmann::json number_json(const Stat& v) {
    if (!v) return nullptr;
    if (std::isnan(*v)) return "nan";
    if (std::isinf(*v)) return *v > 0 ? "inf" : "-inf";
    return *v;
}

std::optional<double> number_from(const nlohmann::json& j, const std::string& where, const std::string& path) {
    if (j.is_null()) return std::nullopt;
    if (j.is_number()) return j.get<double>();
    if (j.is_string()) {
        std::string s = j.get<std::string>();
        if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
        if (s == "inf") return k_inf;
        if (s == "-inf") return -k_inf;
    }
    throw Error(ErrorKind::format, path, "not a fingerprint: " + where + " is not a number");
}

const char* k_stat_names[] = {"mean", "std", "min", "max", "abs_mean", "l2"};

}  // namespace

nlohmann::json stats_json(const TensorStats& s) {
    nlohmann::json j;
    j["count"] = s.count;
    const Stat* v[] = {&s.mean, &s.std, &s.min, &s.max, &s.abs_mean, &s.l2};
    for (size_t i = 0; i < 6; ++i) j[k_stat_names[i]] = number_json(*v[i]);
    j["nan"] = s.nan;
    j["inf"] = s.inf;
    j["hash"] = s.hash.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.hash.text());
    return j;
}

namespace {

nlohmann::json fingerprint_head(const Fingerprint& f) {
    nlohmann::json j = report_head("fingerprint");
    j["file"] = f.file;
    j["file_size"] = f.file_size;
    j["scope"] = f.scope;
    j["tensors"] = nlohmann::json::array();
    return j;
}

}  // namespace

nlohmann::json print_json(const TensorPrint& t) {
    nlohmann::json r = {{"key", t.key}, {"dtype", t.dtype}, {"shape", t.shape}};
    r.update(stats_json(t.stats));
    if (!t.readable) r["hash"] = nullptr;
    return r;
}

nlohmann::json to_json(const Fingerprint& f) {
    nlohmann::json j = fingerprint_head(f);
    for (const auto& t : f.tensors) j["tensors"].push_back(print_json(t));
    return j;
}

void write_json(const Fingerprint& f, const std::function<void(std::string_view)>& sink) {
    write_json_streamed(fingerprint_head(f), 1, {{"tensors", [&](const JsonRowSink& row) {
                                                      for (const auto& t : f.tensors) row(print_json(t));
                                                  }}},
                        sink);
}

namespace {

[[noreturn]] void not_a_fingerprint(const std::string& path, const std::string& why) {
    throw Error(ErrorKind::format, path, "not a fingerprint: " + why);
}

// One row of "tensors" (the n-th, from 1), checked field by field; both readers use it.
TensorPrint tensor_print_from_json(const nlohmann::json& r, size_t n, const std::string& path) {
    auto bad = [&](const std::string& why) { not_a_fingerprint(path, why); };
    std::string where = "tensor " + std::to_string(n);
    if (!r.is_object() || !r.contains("key") || !r["key"].is_string()) bad(where + " has no \"key\"");
    TensorPrint t;
    t.key = r["key"].get<std::string>();
    if (!r.contains("dtype") || !r["dtype"].is_string()) bad(where + " has no \"dtype\"");
    t.dtype = r["dtype"].get<std::string>();
    if (!r.contains("shape") || !r["shape"].is_array()) bad(where + " has no \"shape\"");
    for (const auto& d : r["shape"]) {
        if (!d.is_number_integer()) bad(where + ": \"shape\" is not a list of integers");
        t.shape.push_back(d.get<int64_t>());
    }
    Stat* v[] = {&t.stats.mean, &t.stats.std, &t.stats.min, &t.stats.max, &t.stats.abs_mean, &t.stats.l2};
    for (size_t i = 0; i < 6; ++i)
        if (r.contains(k_stat_names[i])) *v[i] = number_from(r[k_stat_names[i]], where + "." + k_stat_names[i], path);
    auto count = [&](const char* name) -> uint64_t {
        if (!r.contains(name) || r[name].is_null()) return 0;
        if (!r[name].is_number_unsigned()) bad(where + "." + name + " is not a count");
        return r[name].get<uint64_t>();
    };
    t.stats.count = count("count");
    t.stats.nan = count("nan");
    t.stats.inf = count("inf");
    if (r.contains("hash") && r["hash"].is_string()) {
        auto h = ContentHash::parse(r["hash"].get_ref<const std::string&>());
        if (!h) bad(where + ".hash is not \"xxh3-128:\" and 32 hex digits");
        t.stats.hash = *h;
    }
    t.readable = !t.stats.hash.empty();
    return t;
}

// The fingerprint's fields besides its rows.
void fingerprint_header(Fingerprint& f, const nlohmann::json& j, const std::string& path) {
    f.file = json_string_or(j, "file", path);
    f.file_size = j.contains("file_size") && j["file_size"].is_number_unsigned() ? j["file_size"].get<uint64_t>() : 0;
    f.scope = json_string_or(j, "scope", "state_dict");
}

// Builds the document as nlohmann's own DOM parser would, except each element of the top-level
// "tensors" array: that one is built on its own, handed to `on_row` as soon as it is complete, and
// dropped. A fingerprint of 100,000 tensors is 38 MB of JSON and ~140 MB as a whole document.
class RowStreamer final : public nlohmann::json_sax<nlohmann::json> {
public:
    // `on_rows` when a "tensors" array starts (again, if the key is given twice: the last counts, as
    // in the DOM), `on_row` for each of its elements.
    RowStreamer(const std::string& path, std::function<void()> on_rows, std::function<void(const nlohmann::json&)> on_row)
        : m_path(path), m_on_rows(std::move(on_rows)), m_on_row(std::move(on_row)) {}
    nlohmann::json& document() { return m_root; }  // without the rows
    bool saw_rows() const { return m_rows != nullptr; }

    bool null() override { return put(nullptr); }
    bool boolean(bool b) override { return put(b); }
    bool number_integer(number_integer_t v) override { return put(v); }
    bool number_unsigned(number_unsigned_t v) override { return put(v); }
    bool number_float(number_float_t v, const string_t&) override { return put(v); }
    bool string(string_t& s) override { return put(std::move(s)); }
    bool binary(binary_t& b) override { return put(nlohmann::json::binary(std::move(b))); }
    bool key(string_t& k) override {
        m_key = std::move(k);
        return true;
    }
    bool start_object(std::size_t) override { return open(nlohmann::json::object()); }
    bool start_array(std::size_t) override { return open(nlohmann::json::array()); }
    bool end_object() override { return close(); }
    bool end_array() override { return close(); }
    bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& e) override {
        json_parse_failed(m_path, pos, e.id == 406);  // 406: a number too large for a double
    }

private:
    bool at_row_level() const { return m_rows && m_stack.size() == 2 && m_stack.back() == m_rows; }
    nlohmann::json* insert(nlohmann::json&& v) {
        if (m_stack.size() == 1 && m_root.is_object() && m_key == "tensors") {  // (again): what was read goes
            m_rows = nullptr;
            m_on_rows();
        }
        nlohmann::json& parent = *m_stack.back();
        if (parent.is_array()) {
            parent.push_back(std::move(v));
            return &parent.back();
        }
        nlohmann::json& slot = parent[m_key];  // a key given twice: the last value, as the DOM parser
        slot = std::move(v);
        return &slot;
    }
    template <class V>
    bool put(V&& v) {
        if (m_stack.empty()) {
            m_root = std::forward<V>(v);
        } else if (at_row_level()) {
            nlohmann::json row(std::forward<V>(v));
            m_on_row(row);
        } else {
            insert(nlohmann::json(std::forward<V>(v)));
        }
        return true;
    }
    bool open(nlohmann::json&& container) {
        if (m_stack.empty()) {
            m_root = std::move(container);
            m_stack.push_back(&m_root);
        } else if (at_row_level()) {
            m_row = std::move(container);
            m_stack.push_back(&m_row);
        } else {
            bool rows = m_stack.size() == 1 && m_root.is_object() && m_key == "tensors" && container.is_array();
            nlohmann::json* p = insert(std::move(container));
            if (rows) m_rows = p;
            m_stack.push_back(p);
        }
        return true;
    }
    bool close() {
        bool row = m_stack.back() == &m_row;
        m_stack.pop_back();
        if (row) m_on_row(m_row);
        return true;
    }

    const std::string& m_path;
    std::function<void()> m_on_rows;
    std::function<void(const nlohmann::json&)> m_on_row;
    nlohmann::json m_root, m_row;
    std::vector<nlohmann::json*> m_stack;
    std::string m_key;
    nlohmann::json* m_rows = nullptr;
};

}  // namespace

Fingerprint fingerprint_from_json(const std::string& path, const nlohmann::json& j) {
    if (!j.is_object() || !j.contains("tensors") || !j["tensors"].is_array()) not_a_fingerprint(path, "no \"tensors\" list");
    Fingerprint f;
    fingerprint_header(f, j, path);
    size_t n = 0;
    for (const auto& r : j["tensors"]) f.tensors.push_back(tensor_print_from_json(r, ++n, path));
    return f;
}

std::optional<Fingerprint> read_fingerprint_file(const std::string& path) {
    MappedFile file(path);
    std::optional<ByteView> text = json_text(file.view());
    if (!text) return std::nullopt;
    Fingerprint f;
    size_t n = 0;
    std::optional<Error> row_error;  // the first bad row, said once the whole file has parsed
    auto start = [&] {
        f.tensors.clear();
        n = 0;
        row_error.reset();
    };
    RowStreamer rows(path, start, [&](const nlohmann::json& row) {
        ++n;
        if (row_error) return;
        try {
            f.tensors.push_back(tensor_print_from_json(row, n, path));
        } catch (const Error& e) {
            row_error = e;
        }
    });
    nlohmann::json::sax_parse(text->data, text->data + text->size, &rows);
    const nlohmann::json& j = rows.document();
    if (json_string_or(j, "command") == "inspect")
        throw Error(ErrorKind::usage, path,
                    "an inspect report holds no statistics; write a fingerprint with verify --write-fingerprint");
    if (!j.is_object() || !rows.saw_rows()) not_a_fingerprint(path, "no \"tensors\" list");
    if (row_error) throw *row_error;
    fingerprint_header(f, j, path);
    return f;
}

}  // namespace ckpt
