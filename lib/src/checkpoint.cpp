// Opening a checkpoint: sniff the format, read its directory and pickle, then flatten the value tree
// into keyed leaves and find the state dict.
#include "ckpt/checkpoint.hpp"

#include "text_util.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <unordered_map>
#include <unordered_set>

#include "ckpt/error.hpp"
#include "ckpt/mapped_file.hpp"
#include "ckpt/report.hpp"
#include "ckpt/safetensors.hpp"
#include "ckpt/zip.hpp"
#include "checkpoint_builder.hpp"
#include "dist.hpp"
#include "gather.hpp"
#include "torch_hooks.hpp"

namespace ckpt {

const char* state_dict_kind_name(StateDictKind k) {
    switch (k) {
        case StateDictKind::none: return "none";
        case StateDictKind::dict: return "dict";
        case StateDictKind::module: return "module";
        case StateDictKind::tree: return "tree";
    }
    return "none";
}

const char* format_name(Format f) {
    switch (f) {
        case Format::torch_zip: return "torch-zip";
        case Format::torchscript: return "torchscript";
        case Format::safetensors: return "safetensors";
        case Format::legacy: return "legacy";
        case Format::distributed: return "distributed";
        case Format::torch_export: return "torch-export";
    }
    return "?";
}

const char* layout_name(Layout l) {
    switch (l) {
        case Layout::strided: return "strided";
        case Layout::sparse_coo: return "sparse_coo";
        case Layout::sparse_csr: return "sparse_csr";
        case Layout::sparse_csc: return "sparse_csc";
        case Layout::sparse_bsr: return "sparse_bsr";
        case Layout::sparse_bsc: return "sparse_bsc";
        case Layout::nested: return "strided";  // torch: layout strided, is_nested
        case Layout::jagged: return "jagged";
    }
    return "strided";
}

std::optional<Layout> layout_from_name(std::string_view name) {
    if (name.substr(0, 6) == "torch.") name.remove_prefix(6);
    static constexpr std::pair<std::string_view, Layout> k_layouts[] = {
        {"strided", Layout::strided},       {"sparse_coo", Layout::sparse_coo}, {"sparse_csr", Layout::sparse_csr},
        {"sparse_csc", Layout::sparse_csc}, {"sparse_bsr", Layout::sparse_bsr}, {"sparse_bsc", Layout::sparse_bsc},
        {"jagged", Layout::jagged}};
    for (const auto& [n, l] : k_layouts)
        if (n == name) return l;
    return std::nullopt;
}

const char* TensorInfo::count_elements() {
    uint64_t n = 1, span = 1;
    for (size_t d = 0; d < shape.size(); ++d) {
        if (shape[d] < 0 || stride[d] < 0) return "negative size or stride";
        auto m = checked_mul(n, static_cast<uint64_t>(shape[d]));
        if (!m) return "element count overflows";
        n = *m;
    }
    if (n == 0) span = 0;
    for (size_t d = 0; d < shape.size() && n; ++d) {
        auto step = checked_mul(static_cast<uint64_t>(shape[d] - 1), static_cast<uint64_t>(stride[d]));
        auto e = step ? checked_add(span, *step) : std::nullopt;
        if (!e) return "tensor extent overflows";
        span = *e;
    }
    if (!checked_mul(n, dtype_size(dtype))) return "byte size overflows";
    numel = n;
    extent = span;
    return nullptr;
}

bool TensorInfo::contiguous() const {
    int64_t expected = 1;
    for (size_t d = shape.size(); d-- > 0;) {
        if (shape[d] != 1 && stride[d] != expected) return false;
        expected *= shape[d];
    }
    return true;
}

std::string key_part(const Value* key) {
    switch (key->kind) {
        case ValueKind::string: return std::string(key->s);
        case ValueKind::integer: return std::to_string(key->i);
        default: return repr(key, 60, 2);
    }
}

Checkpoint::~Checkpoint() = default;
ByteView Checkpoint::pickle_bytes() const { return m_pickle ? m_pickle->view() : ByteView{}; }
uint64_t Checkpoint::file_size() const {
    if (m_dist) return m_dist->bytes;
    return m_span ? m_span : m_file ? m_file->size() : 0;
}

ByteView Checkpoint::bytes() const { return m_span ? *m_file->view().sub(m_base, m_span) : m_file->view(); }
size_t Checkpoint::record_count() const { return m_records.size(); }

const ZipArchive& Checkpoint::zip() const {
    if (!m_zip) throw Error(ErrorKind::unsupported, m_path, std::string("a ") + format_name(m_format) + " file has no zip archive");
    return *m_zip;
}

const MappedFile& Checkpoint::record_file(size_t i) const {
    if (m_dist) {
        if (m_records[i].pieces.empty()) throw Error(ErrorKind::usage, m_path, "record " + m_records[i].name + " is empty: no file holds it");
        return *m_records[i].pieces.front().file;
    }
    if (!m_shards.empty()) return m_shards[m_record_owner[i].first]->record_file(m_record_owner[i].second);
    return *m_file;
}

RecordData Checkpoint::record_data(size_t i) const {
    if (m_dist) return detail::gather(m_records[i]);
    if (!m_shards.empty()) return m_shards[m_record_owner[i].first]->record_data(m_record_owner[i].second);
    if (m_zip) return m_zip->record_data(m_zip->entries()[i]);
    auto [begin, end] = m_record_ranges[i];
    return RecordData(*bytes().sub(begin, end - begin));
}

std::optional<uint64_t> Checkpoint::record_file_offset(size_t i) const {
    if (m_dist) return std::nullopt;  // gathered: no one range to copy from
    if (!m_shards.empty()) return m_shards[m_record_owner[i].first]->record_file_offset(m_record_owner[i].second);
    if (!m_zip) return m_base + m_record_ranges[i].first;
    const ZipEntry& e = m_zip->entries()[i];
    if (e.method != 0) return std::nullopt;
    if (m_span) return m_base + m_zip->data_offset(e);  // embedded: the fd's offsets are not the archive's
    return m_zip->data_offset(e, m_file->fd());
}

std::optional<size_t> Checkpoint::record_index(const std::string& name) const {
    size_t pos = m_record_by_name.find(name, [this](size_t i) -> std::string_view { return m_records[i].name; });
    if (pos == StringIndex::npos) return std::nullopt;
    return pos;
}

void Checkpoint::add_record(RecordInfo record) {
    m_record_by_name.insert(record.name, m_records.size(),
                            [this](size_t i) -> std::string_view { return m_records[i].name; });
    m_records.push_back(std::move(record));
}
bool Checkpoint::zip64() const { return m_zip && m_zip->zip64(); }
size_t Checkpoint::compressed_records() const {
    if (!m_zip) return 0;
    size_t n = 0;
    for (const auto& e : m_zip->entries()) n += e.method != 0;
    return n;
}

std::vector<size_t> Checkpoint::storage_users() const {
    std::vector<size_t> users(m_storages.size(), 0);
    std::unordered_set<const Value*> seen;
    for (const Entry& e : m_entries)
        if (e.tensor && m_tensors[*e.tensor].strided_view() && seen.insert(e.value).second) ++users[m_tensors[*e.tensor].storage];
    return users;
}

uint64_t Checkpoint::tensor_bytes(const TensorInfo& t) const {
    if (t.no_data) return 0;
    if (t.layout == Layout::strided) return t.nbytes();
    uint64_t bytes = 0;
    for (const TensorPart& p : t.extra->parts) bytes += tensor_bytes(m_tensors[p.tensor]);
    return bytes;
}

std::vector<std::vector<int64_t>> Checkpoint::component_shapes(const TensorInfo& t) const {
    std::vector<std::vector<int64_t>> out;
    if (t.extra)
        for (size_t i : t.extra->components) out.push_back(m_tensors[i].shape);
    return out;
}

namespace {

constexpr int k_max_walk_depth = 2000;

using text::starts_with;

// The first bytes of formats this version does not read yet, for a clear message.
void reject_other_formats(ByteView file) {
    if (file.size == 0) throw Error(ErrorKind::format, "", "empty file (0 bytes): not a checkpoint");
    if (file.size >= 265 && std::string_view(reinterpret_cast<const char*>(file.data) + 257, 5) == "ustar")
        throw Error(ErrorKind::unsupported, "", "tar-format torch checkpoint (torch < 0.4) is not supported");
    if (file.data[0] == 0x80)
        throw Error(ErrorKind::format, "", "a bare pickle, not a torch.save checkpoint");
    throw Error(ErrorKind::format, "", "not a PyTorch checkpoint (no zip archive, no known format)");
}

}  // namespace


void Checkpoint::Builder::read_torch_zip() {
    ZipArchive zip = ZipArchive::open(c.bytes());
    c.m_zip = std::make_unique<ZipArchive>(std::move(zip));
    const auto& entries = c.m_zip->entries();
    c.m_records.reserve(entries.size());
    // A CRC-32 of 0 on a record that is not empty is torch 2.x saying it wrote none
    // (set_crc32_options(False), or skip_data()'s storages), not a checksum: the record is unchecked.
    for (const auto& e : entries) c.add_record({e.name, e.size, e.crc32 != 0 || e.size == 0, e.crc32, {}});
    if (entries.empty()) throw Error(ErrorKind::format, "", "an empty zip archive, not a checkpoint");
    const std::string& first = entries.front().name;
    size_t slash = first.find('/');
    if (slash == std::string::npos && sniff_export(*c.m_zip)) {  // its records at the top level, not in a folder
        c.m_records.clear();
        c.m_record_by_name = StringIndex();
        return read_export();
    }
    if (slash == std::string::npos || slash == 0)
        throw Error(ErrorKind::format, "",
                    "zip archive whose first record '" + first + "' is not in a folder: not a torch.save file");
    c.m_root = first.substr(0, slash);
    std::string prefix = c.m_root + "/";
    const ZipEntry* pkl = c.m_zip->find(prefix + "data.pkl");
    if (!pkl)
        throw Error(ErrorKind::format, "", "zip archive without " + prefix + "data.pkl: not a torch.save checkpoint");
    if (c.m_zip->find(prefix + "constants.pkl") || c.m_zip->find(prefix + "code/")) c.m_format = Format::torchscript;
    const std::string code = prefix + "code/";
    for (const auto& e : entries)
        if (starts_with(e.name, code)) {
            c.m_format = Format::torchscript;
            break;
        }

    auto small_text = [&](const std::string& name) -> std::optional<std::string> {
        const ZipEntry* e = c.m_zip->find(prefix + name);
        if (!e) return std::nullopt;
        if (e->size > 64) throw Error(ErrorKind::corrupt, "", "record " + e->name + " is too large");
        RecordData d = c.m_zip->record_data(*e);
        std::string s(d.view().as_chars());
        while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
        return s;
    };
    c.m_version = small_text("version").value_or(small_text(".data/version").value_or(""));
    if (auto bo = small_text("byteorder")) {
        c.m_byteorder = *bo;
        c.m_byteorder_recorded = true;
        if (*bo != "little" && *bo != "big")
            throw Error(ErrorKind::corrupt, "", "byteorder record says '" + *bo + "'");
    }

    c.m_pickle = std::make_unique<RecordData>(c.m_zip->record_data(*pkl));
    uint64_t base = pkl->method == 0 ? c.m_base + c.m_zip->data_offset(*pkl) : 0;
    c.m_pickle_size = c.m_pickle->view().size;
    c.m_pickle_record = pkl->name;
    if (options.trace_pickle) c.m_trace = std::make_unique<PickleTrace>();
    TorchHooks hooks(c.m_arena, c.m_storages, c.m_tensors, c.m_globals, c.m_problems, pkl->name);
    hooks.reserve(entries.size());  // a hint: a record per storage, a tensor per storage as a rule
    PickleResult r = run_pickle(c.m_pickle->view(), c.m_arena, hooks, pkl->name, base,
                                options.pickle_limits, c.m_trace.get());
    hooks.finish();
    c.m_root_value = r.root;
    c.m_protocol = r.protocol;

    const std::string data = prefix + "data/";
    for (auto& s : c.m_storages) {
        s.record.reserve(data.size() + s.key.size());
        s.record.append(data).append(s.key);
        if (const ZipEntry* e = c.m_zip->find(s.record)) {
            s.record_present = true;
            s.record_size = e->size;
        }
    }
}

// safetensors: every tensor is its own storage (a record: its byte range), contiguous, at offset 0;
// the value tree is one dict of name → tensor, so the rest of the model (keys, state dict) is the
// same as for a torch.save state dict.
void Checkpoint::Builder::read_safetensors_file() {
    SafetensorsHeader h = read_safetensors(c.bytes());
    c.m_format = Format::safetensors;
    c.m_metadata = std::move(h.metadata);
    c.m_pickle_size = h.header_size;  // the header plays the pickle's part
    Value* root = c.m_arena.make(ValueKind::dict, 8);
    for (const SafetensorsTensor& st : h.tensors) {
        StorageInfo s;
        s.key = st.name;
        s.dtype = st.dtype;
        s.numel = st.numel;
        s.location = "cpu";
        s.record = st.name;
        s.record_present = true;
        s.record_size = st.end - st.begin;
        TensorInfo t;
        t.dtype = st.dtype;
        t.shape = st.shape;
        t.stride.assign(st.shape.size(), 1);
        for (size_t d = st.shape.size(); d-- > 1;) t.stride[d - 1] = t.stride[d] * std::max<int64_t>(st.shape[d], 1);
        t.storage = c.m_storages.size();
        t.rebuild = "safetensors";
        t.numel = st.numel;
        t.extent = st.numel;
        Value* key = c.m_arena.make(ValueKind::string, 8);
        key->s = c.m_arena.own(st.name);
        Value* tv = c.m_arena.make(ValueKind::tensor, st.begin);
        tv->i = static_cast<int64_t>(c.m_tensors.size());
        tv->s = c.m_arena.own(std::string(dtype_name(st.dtype)));
        c.m_arena.append(root->entries, key);
        c.m_arena.append(root->entries, tv);
        c.add_record({st.name, st.end - st.begin, false, 0, {}});
        c.m_record_ranges.push_back({st.begin, st.end});
        c.m_storages.push_back(std::move(s));
        c.m_tensors.push_back(std::move(t));
    }
    c.m_root_value = root;
}

void Checkpoint::Builder::check_storages() {
    for (const auto& s : c.m_storages) {
        if (!s.record_present) {
            c.m_problems.push_back({"missing_record", s.record,
                                    "storage " + s.key + " has no record " + s.record});
        } else if (s.record_size != s.nbytes()) {
            c.m_problems.push_back(
                {"record_size", s.record,
                 "record " + s.record + " holds " + std::to_string(s.record_size) + " bytes, but storage " +
                     s.key + " is " + std::to_string(s.numel) + " × " + std::string(dtype_name(s.dtype)) +
                     " = " + std::to_string(s.nbytes()) + " bytes"});
        }
    }
    std::unordered_set<size_t> reported;
    // A sparse or nested tensor is checked through the tensors it is made of (its key, then the part's name).
    std::function<void(const std::string&, size_t)> check = [&](const std::string& key, size_t i) {
        const TensorInfo& t = c.m_tensors[i];
        if (t.extra) {
            for (const TensorPart& p : t.extra->parts) check(key + "." + std::string(p.name), p.tensor);
            for (size_t k = 0; k < t.extra->components.size(); ++k) check(key + "[" + std::to_string(k) + "]", t.extra->components[k]);
        }
        if (!t.strided_view() || !reported.insert(i).second) return;
        const StorageInfo& s = c.m_storages[t.storage];
        uint64_t elem_capacity = s.dtype == DType::untyped ? s.numel / dtype_size(t.dtype) : s.numel;
        uint64_t need = t.numel == 0 ? 0 : static_cast<uint64_t>(t.storage_offset) + t.extent;
        if (need > elem_capacity)
            c.m_problems.push_back(
                {"out_of_bounds", key,
                 "tensor " + key + " (offset " + std::to_string(t.storage_offset) + ", spans " +
                     std::to_string(t.extent) + " elements) runs past the end of storage " + s.key +
                     " (" + std::to_string(elem_capacity) + " elements)"});
    };
    for (const Entry& e : c.m_entries)
        if (e.tensor && !reported.count(*e.tensor)) check(e.key, *e.tensor);
}

namespace {

// The int64 elements of a small plain tensor (a nested tensor's sizes, strides, offsets), in
// row-major order; nullopt with `why` set when they cannot be read.
std::optional<std::vector<int64_t>> small_ints(const Checkpoint& c, const TensorInfo& t, std::string& why) {
    if (!t.plain() || t.dtype != DType::int64) return why = "not a plain int64 tensor", std::nullopt;
    if (t.numel > (1u << 22)) return why = std::to_string(t.numel) + " elements, more than this reader takes", std::nullopt;
    const StorageInfo& s = c.storages()[t.storage];
    auto r = c.record_index(s.record);
    if (!s.record_present || !r) return why = "its record " + s.record + " is missing", std::nullopt;
    RecordData data = c.record_data(*r);
    ByteView v = data.view();
    auto end = checked_add(static_cast<uint64_t>(t.storage_offset), t.extent);
    auto bytes = end ? checked_mul(*end, uint64_t{8}) : std::nullopt;
    if (t.numel && (!bytes || *bytes > v.size)) return why = "its record " + s.record + " is too short", std::nullopt;
    std::vector<int64_t> out;
    out.reserve(t.numel);
    std::vector<int64_t> at(t.shape.size(), 0);
    for (uint64_t n = 0; n < t.numel; ++n) {
        uint64_t el = static_cast<uint64_t>(t.storage_offset);
        for (size_t d = 0; d < at.size(); ++d) el += static_cast<uint64_t>(at[d] * t.stride[d]);
        int64_t x;
        std::memcpy(&x, v.data + el * 8, 8);
        out.push_back(x);
        for (size_t d = at.size(); d-- > 0;) {
            if (++at[d] < t.shape[d]) break;
            at[d] = 0;
        }
    }
    return out;
}

// A nested tensor's components each become a tensor of the table: a lying sizes tensor must not
// make millions of them.
constexpr size_t k_max_components = 1u << 20;

}  // namespace

// Nested and jagged tensors: each component becomes a view of the buffer (values), its shape,
// strides and offset read from the small int64 parts. These few bytes are the only elements
// opening a checkpoint reads, and only where such tensors are.
void Checkpoint::Builder::resolve_components() {
    for (size_t i = 0, n = c.m_tensors.size(); i < n; ++i) {
        Layout layout = c.m_tensors[i].layout;
        if (!c.m_tensors[i].nested() || !c.m_tensors[i].extra->components.empty()) continue;
        auto e = std::make_shared<TensorExtra>(*c.m_tensors[i].extra);
        auto fail = [&](const std::string& why) {
            c.m_problems.push_back({"nested_parts", "", "a nested tensor's components cannot be read: " + why});
        };
        std::string why;
        std::vector<std::optional<std::vector<int64_t>>> ints;
        for (size_t p = 1; p < e->parts.size(); ++p) {
            ints.push_back(small_ints(c, c.m_tensors[e->parts[p].tensor], why));
            if (!ints.back()) break;
        }
        if (ints.empty() || !ints.back()) {
            fail(std::string(e->parts[ints.size()].name) + " is " + why);
            continue;
        }
        const TensorInfo base = c.m_tensors[e->parts[0].tensor];
        // nested: sizes [n, d], strides [n, d], offsets [n]; jagged: offsets [B + 1] (and lengths [B])
        // along values' ragged dimension
        bool strided = layout == Layout::nested;
        const TensorInfo& sizes = c.m_tensors[e->parts[1].tensor];
        size_t count = strided ? (sizes.shape.empty() ? 0 : static_cast<size_t>(sizes.shape[0]))
                               : (ints[0]->empty() ? 0 : ints[0]->size() - 1);
        size_t dims = strided && sizes.shape.size() == 2 ? static_cast<size_t>(sizes.shape[1]) : 0;
        if (count > k_max_components) {
            fail(std::to_string(count) + " components, more than this reader takes (" + std::to_string(k_max_components) + ")");
            continue;
        }
        if (strided ? sizes.shape.size() > 2 || ints[0]->size() != count * dims || ints[1]->size() != count * dims || ints[2]->size() != count
                    : ints.size() > 1 && ints[1]->size() != count) {
            fail(strided ? "sizes, strides and offsets do not agree" : "offsets and lengths do not agree");
            continue;
        }
        std::vector<TensorInfo> comps(count);
        for (size_t k = 0; k < count; ++k) {
            TensorInfo& t = comps[k];
            t.dtype = base.dtype;
            t.storage = base.storage;
            t.rebuild = base.rebuild;
            bool overflow;
            if (strided) {
                t.shape.assign(ints[0]->begin() + k * dims, ints[0]->begin() + (k + 1) * dims);
                t.stride.assign(ints[1]->begin() + k * dims, ints[1]->begin() + (k + 1) * dims);
                overflow = __builtin_add_overflow(base.storage_offset, (*ints[2])[k], &t.storage_offset);
            } else {
                const std::vector<int64_t>& off = *ints[0];
                size_t r = static_cast<size_t>(e->axis - 1);
                t.shape = base.shape;
                t.stride = base.stride;
                int64_t step = 0;
                overflow = (ints.size() > 1 ? (t.shape[r] = (*ints[1])[k], false) : __builtin_sub_overflow(off[k + 1], off[k], &t.shape[r])) ||
                           __builtin_mul_overflow(off[k], base.stride[r], &step) ||
                           __builtin_add_overflow(base.storage_offset, step, &t.storage_offset);
            }
            if (overflow) t.storage_offset = -1;  // refused below
        }
        uint64_t numel = 0;
        bool ok = true;
        for (TensorInfo& t : comps) {
            ok = ok && t.storage_offset >= 0 && !t.count_elements();
            numel += t.numel;
        }
        if (!ok) {
            fail("a component's size, stride or offset is negative or too large");
            continue;
        }
        for (TensorInfo& t : comps) {
            e->components.push_back(c.m_tensors.size());
            c.m_tensors.push_back(std::move(t));
        }
        c.m_tensors[i].numel = numel;
        c.m_tensors[i].extra = std::move(e);
    }
}

void Checkpoint::Builder::add_leaf(const std::string& key, const Value* v) {
    Entry e;
    e.key = key;
    e.value = v;
    if (v->kind == ValueKind::tensor) e.tensor = static_cast<size_t>(v->i);
    entry_by_key.insert(key, c.m_entries.size(), entry_key());
    c.m_entries.push_back(std::move(e));
}

bool Checkpoint::Builder::contains_tensor(const Value* v, int depth, std::unordered_set<const Value*>& path) {
    if (v->kind == ValueKind::tensor) return true;
    auto it = m_has_tensor.find(v);
    if (it != m_has_tensor.end()) return it->second;
    if (depth > k_max_walk_depth)
        throw Error(ErrorKind::limit, "", "value tree nested deeper than " + std::to_string(k_max_walk_depth) + " levels");
    if (!path.insert(v).second) return false;  // a cycle: nothing new below
    bool found = false;
    auto scan = [&](const ValueList& vs) {
        for (const Value* x : vs)
            if (!found && contains_tensor(x, depth + 1, path)) found = true;
    };
    scan(v->items);
    scan(v->entries);
    if (!found && v->state) found = contains_tensor(v->state, depth + 1, path);
    if (!found && v->kind == ValueKind::object && v->args) found = contains_tensor(v->args, depth + 1, path);
    path.erase(v);
    m_has_tensor[v] = found;
    return found;
}

void Checkpoint::Builder::flatten(const Value* v, std::string& key, int depth,
                                  std::unordered_set<const Value*>& path) {
    if (depth > k_max_walk_depth)
        throw Error(ErrorKind::limit, "", "value tree nested deeper than " + std::to_string(k_max_walk_depth) + " levels");
    auto child = [&](std::string_view part, const Value* x) {
        size_t old = key.size();
        if (!key.empty()) key += '.';
        key += part;
        flatten(x, key, depth + 1, path);
        key.resize(old);
    };
    // A dict key's path part; str keys, nearly all of them, without a string of their own.
    auto dict_child = [&](const Value* k, const Value* x) {
        if (k->kind == ValueKind::string) child(k->s, x);
        else child(key_part(k), x);
    };
    bool is_dict = v->kind == ValueKind::dict;
    bool is_seq = v->kind == ValueKind::list || v->kind == ValueKind::tuple;
    bool is_obj = v->kind == ValueKind::object;
    std::unordered_set<const Value*> scratch;
    bool recurse = (is_dict && v->dict_size() > 0) ||
                   ((is_seq || is_obj) && contains_tensor(v, 0, scratch));
    if (!recurse || path.count(v)) {
        add_leaf(key, v);
        if (v->kind == ValueKind::tensor && v->state && !path.count(v)) {
            // A tensor's Python attributes (t.tag = "ema"): leaves under its key, as torch's
            // __dict__ shows them; state is a dict, or (dict or None, slots dict).
            path.insert(v);
            const Value* st = v->state;
            bool pair = st->kind == ValueKind::tuple;
            for (const Value* d : {st, pair ? static_cast<const Value*>(st->items[0]) : nullptr,
                                   pair ? static_cast<const Value*>(st->items[1]) : nullptr})
                if (d && d->kind == ValueKind::dict)
                    for (size_t n = 0; n < d->dict_size(); ++n) dict_child(d->dict_key(n), d->dict_value(n));
            path.erase(v);
        }
        return;
    }
    path.insert(v);
    if (is_dict || is_obj) {
        for (size_t n = 0; n < v->dict_size(); ++n) dict_child(v->dict_key(n), v->dict_value(n));
    }
    if (is_seq || is_obj) {
        for (size_t n = 0; n < v->items.size(); ++n) child(std::to_string(n), v->items[n]);
    }
    if (is_obj) {
        const Value* st = v->state;
        if (st && st->kind == ValueKind::tuple && st->items.size() == 2 && st->items[0]->kind == ValueKind::dict)
            st = st->items[0];
        if (st && st->kind == ValueKind::dict) {
            for (size_t n = 0; n < st->dict_size(); ++n) dict_child(st->dict_key(n), st->dict_value(n));
        } else if (st && st->kind != ValueKind::none) {
            child("__state__", st);
        }
        if (v->args && !v->args->items.empty()) {
            std::unordered_set<const Value*> s2;
            if (contains_tensor(v->args, 0, s2)) child("__args__", v->args);
        }
    }
    path.erase(v);
}

size_t Checkpoint::Builder::dict_tensor_count(const Value* v) const {
    if (!v || v->kind != ValueKind::dict) return 0;
    size_t n = 0;
    for (size_t i = 0; i < v->dict_size(); ++i)
        n += v->dict_key(i)->kind == ValueKind::string && v->dict_value(i)->kind == ValueKind::tensor;
    return n;
}

void Checkpoint::Builder::take_dict(const Value* d, const std::string& path) {
    StateDict& sd = c.m_state_dict;
    sd.kind = StateDictKind::dict;
    sd.path = path;
    sd.value = d;
    sd.entries.reserve(d->dict_size());
    std::string full;
    for (size_t i = 0; i < d->dict_size(); ++i) {
        const Value* k = d->dict_key(i);
        const Value* v = d->dict_value(i);
        if (k->kind != ValueKind::string || v->kind != ValueKind::tensor) {
            ++sd.other_values;
            continue;
        }
        if (!path.empty()) full.assign(path).append(".").append(k->s);
        size_t entry = entry_by_key.find(path.empty() ? k->s : std::string_view(full), entry_key());
        if (entry != StringIndex::npos) sd.entries.push_back({std::string(k->s), entry});
    }
    sd.has_metadata = d->state && d->state->kind == ValueKind::dict && d->state->get("_metadata");
}

bool Checkpoint::Builder::is_module(const Value* v) const {
    if (!v || v->kind != ValueKind::object || !v->state || v->state->kind != ValueKind::dict) return false;
    return v->state->get("_parameters") && v->state->get("_modules");
}

void Checkpoint::Builder::walk_module(const Value* m, const std::string& entry_path,
                                      const std::string& name_prefix, int depth) {
    if (depth > k_max_walk_depth) throw Error(ErrorKind::limit, "", "module tree nested too deeply");
    const Value* st = m->state;
    auto join = [](const std::string& a, const std::string& b) { return a.empty() ? b : a + "." + b; };
    std::unordered_set<std::string> non_persistent;
    if (const Value* np = st->get("_non_persistent_buffers_set"))
        for (const Value* x : np->items)
            if (x->kind == ValueKind::string) non_persistent.insert(std::string(x->s));
    for (const char* group : {"_parameters", "_buffers"}) {
        const Value* d = st->get(group);
        if (!d || d->kind != ValueKind::dict) continue;
        for (size_t i = 0; i < d->dict_size(); ++i) {
            const Value* k = d->dict_key(i);
            if (k->kind != ValueKind::string || d->dict_value(i)->kind != ValueKind::tensor) continue;
            std::string name(k->s);
            if (std::string(group) == "_buffers" && non_persistent.count(name)) continue;
            size_t entry = entry_by_key.find(join(join(entry_path, group), name), entry_key());
            if (entry != StringIndex::npos) c.m_state_dict.entries.push_back({name_prefix + name, entry});
        }
    }
    const Value* mods = st->get("_modules");
    if (!mods || mods->kind != ValueKind::dict) return;
    for (size_t i = 0; i < mods->dict_size(); ++i) {
        const Value* k = mods->dict_key(i);
        const Value* sub = mods->dict_value(i);
        if (k->kind != ValueKind::string || !is_module(sub)) continue;
        std::string name(k->s);
        walk_module(sub, join(join(entry_path, "_modules"), name), name_prefix + name + ".", depth + 1);
    }
}

void Checkpoint::Builder::take_module(const Value* m, const std::string& path) {
    c.m_state_dict.kind = StateDictKind::module;
    c.m_state_dict.path = path;
    c.m_state_dict.value = m;
    walk_module(m, path, "", 0);
}

// Resolves a dotted path through dicts and object attributes; keys may contain dots themselves,
// so the longest matching key wins at each level.
const Value* Checkpoint::Builder::resolve(const std::string& dotted, std::string& path_out) const {
    const Value* v = c.m_root_value;
    std::string rest = dotted;
    path_out.clear();
    while (!rest.empty()) {
        const Value* d = v;
        if (v->kind == ValueKind::object && v->state && v->state->kind == ValueKind::dict) d = v->state;
        if (d->kind != ValueKind::dict) return nullptr;
        const Value* next = nullptr;
        size_t used = 0;
        for (size_t i = 0; i < d->dict_size(); ++i) {
            std::string k = key_part(d->dict_key(i));
            if (k.size() > used && (rest == k || starts_with(rest, k + "."))) {
                next = d->dict_value(i);
                used = k.size();
            }
        }
        if (!next) return nullptr;
        path_out += (path_out.empty() ? "" : ".") + rest.substr(0, used);
        rest = used == rest.size() ? "" : rest.substr(used + 1);
        v = next;
    }
    return v;
}

void Checkpoint::Builder::find_state_dict() {
    const Value* root = c.m_root_value;
    if (options.state_dict_key) {
        std::string path;
        const Value* v = resolve(*options.state_dict_key, path);
        if (!v)
            throw Error(ErrorKind::usage, "", "--state-dict-key '" + *options.state_dict_key + "': no such key");
        if (is_module(v)) return take_module(v, path);
        if (dict_tensor_count(v) == 0)
            throw Error(ErrorKind::usage, "",
                        "--state-dict-key '" + *options.state_dict_key + "' is a " + type_name(v) +
                            ", not a mapping of names to tensors");
        return take_dict(v, path);
    }
    if (is_module(root)) return take_module(root, "");

    // Top level first, then the names training code uses, in this order; most tensors wins.
    static const char* k_names[] = {"state_dict", "model", "model_state_dict", "module", "net",
                                    "network", "ema", "model_ema", "ema_state_dict", "params",
                                    "weights", "generator"};
    const Value* best = nullptr;
    std::string best_path;
    size_t best_count = 0;
    auto consider = [&](const Value* v, const std::string& path) {
        size_t n = dict_tensor_count(v);
        if (n > best_count) {
            best = v;
            best_path = path;
            best_count = n;
        }
    };
    consider(root, "");
    if (root->kind == ValueKind::dict)
        for (const char* name : k_names) {
            const Value* v = root->get(name);
            if (v && is_module(v) && !best) return take_module(v, name);
            consider(v, name);
        }
    if (best) return take_dict(best, best_path);

    // Anywhere else: the largest mapping of names to tensors, breadth first.
    std::vector<std::pair<const Value*, std::string>> queue{{root, ""}};
    std::unordered_set<const Value*> seen{root};
    for (size_t q = 0; q < queue.size() && q < 1'000'000; ++q) {
        auto [v, path] = queue[q];
        consider(v, path);
        const Value* d = v->kind == ValueKind::object ? v->state : v;
        if (!d || d->kind != ValueKind::dict) continue;
        for (size_t i = 0; i < d->dict_size(); ++i) {
            const Value* x = d->dict_value(i);
            if ((x->kind == ValueKind::dict || x->kind == ValueKind::object) && seen.insert(x).second)
                queue.push_back({x, path.empty() ? key_part(d->dict_key(i)) : path + "." + key_part(d->dict_key(i))});
        }
    }
    if (best && c.m_format != Format::torchscript) return take_dict(best, best_path);

    // A TorchScript module keeps parameters as attributes: every tensor by its path.
    if (c.m_format == Format::torchscript) {
        c.m_state_dict.kind = StateDictKind::tree;
        c.m_state_dict.value = root;
        for (size_t i = 0; i < c.m_entries.size(); ++i)
            if (c.m_entries[i].tensor) c.m_state_dict.entries.push_back({c.m_entries[i].key, i});
    }
}

std::unique_ptr<Checkpoint> Checkpoint::open(const std::string& path, const OpenOptions& options) {
    DistTarget dist = dist_target(path);  // dist.cpp
    if (dist.kind != DistKind::none) {
        try {
            return dist.kind == DistKind::deepspeed ? open_deepspeed(dist.dir, options) : open_dcp(dist.dir, options);
        } catch (const Error& e) {
            if (e.path().empty()) throw e.with_path(path);
            throw;
        }
    }
    if (is_sharded_index(path)) {  // sharded.cpp
        try {
            return open_index(path, options);
        } catch (const Error& e) {
            if (e.path().empty()) throw e.with_path(path);
            throw;
        }
    }
    std::unique_ptr<Checkpoint> c(new Checkpoint());
    c->m_path = path;
    try {
        c->m_file = std::make_shared<MappedFile>(path);
        c->read(options);
    } catch (const Error& e) {
        if (e.path().empty()) throw e.with_path(path);
        throw;
    }
    return c;
}

std::unique_ptr<Checkpoint> Checkpoint::open_embedded(std::shared_ptr<MappedFile> file, uint64_t offset, uint64_t length,
                                                      const std::string& name, const OpenOptions& options) {
    std::unique_ptr<Checkpoint> c(new Checkpoint());
    c->m_path = name;
    if (!file->view().sub(offset, length) || length == 0)
        throw Error(ErrorKind::corrupt, name,
                    "bytes " + std::to_string(offset) + "+" + std::to_string(length) + " lie past the end of " + file->path() + " (" +
                        std::to_string(file->size()) + " bytes): truncated?");
    c->m_file = std::move(file);
    c->m_base = offset;
    c->m_span = length;
    try {
        if (!ZipArchive::sniff(c->bytes()))
            throw Error(ErrorKind::corrupt, name, "holds no torch.save archive at byte " + std::to_string(offset) + " of " + c->m_file->path());
        c->read(options);
    } catch (const Error& e) {
        if (e.path().empty()) throw e.with_path(name);
        throw;
    }
    return c;
}

// The one container at bytes(): sniffed, read, its value tree flattened, its state dict found.
void Checkpoint::read(const OpenOptions& options) {
    Builder b{*this, options, {}, {}};
    if (ZipArchive::sniff(bytes())) b.read_torch_zip();
    else if (sniff_safetensors(bytes())) b.read_safetensors_file();
    else if (sniff_legacy(bytes())) b.read_legacy();
    else reject_other_formats(bytes());
    for (const TensorInfo& t : m_tensors)
        if (t.nested()) {
            b.resolve_components();
            break;
        }
    std::string key;
    std::unordered_set<const Value*> on_path;
    m_entries.reserve(m_tensors.size());  // a hint: most leaves of a checkpoint are tensors
    advise_huge_pages(m_entries);
    b.entry_by_key.reserve(m_tensors.size());
    b.flatten(m_root_value, key, 0, on_path);
    b.check_storages();
    b.find_state_dict();
}

}  // namespace ckpt
