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
