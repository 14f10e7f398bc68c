// The checkpoint model's answers: Checkpoint::open asks each format (formats/) whether the path or
// its bytes are its own, and every accessor answers from the Contents the format's reader filled.
#include "ckpt/checkpoint.hpp"


#include "ckpt/error.hpp"
#include "formats/format.hpp"
#include "formats/gather.hpp"
#include "model/contents.hpp"

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

uint64_t TensorInfo::repeats() const {
    uint64_t r = 1;
    for (size_t d = 0; d < shape.size(); ++d)
        if (stride[d] == 0 && shape[d] > 1) r *= static_cast<uint64_t>(shape[d]);  // ≤ numel: no overflow
    return r;
}

TensorInfo TensorInfo::unrepeated() const {
    TensorInfo t = *this;
    t.shape.clear();
    t.stride.clear();
    for (size_t d = 0; d < shape.size(); ++d)
        if (stride[d] != 0 || shape[d] <= 1) {
            t.shape.push_back(shape[d]);
            t.stride.push_back(stride[d]);
        }
    t.numel = numel / repeats();
    return t;
}

std::string shape_text(const std::vector<int64_t>& shape) {
    if (shape.empty()) return "()";
    std::string s;
    for (size_t i = 0; i < shape.size(); ++i) {
        if (i) s += "×";
        s += std::to_string(shape[i]);
    }
    return s;
}

std::string tensor_shape_text(const Checkpoint& c, const TensorInfo& t) {
    if (t.nested()) {
        std::string s = t.layout == Layout::jagged ? "jagged " : "nested ";
        auto shapes = c.component_shapes(t);
        if (shapes.empty()) return s + "(components unread)";
        for (size_t i = 0; i < shapes.size() && i < 4; ++i) s += (i ? ", " : "") + shape_text(shapes[i]);
        if (shapes.size() > 4) s += ", … (" + std::to_string(shapes.size()) + ")";
        return s;
    }
    std::string s = shape_text(t.shape);
    if (t.layout != Layout::strided) s += std::string(" ") + layout_name(t.layout);
    if (t.no_data) s += " " + (t.extra ? t.extra->device : std::string("meta"));
    if (t.quantized()) s += " " + std::string(t.extra->qscheme);
    return s;
}

std::string key_part(const Value* key) {
    switch (key->kind) {
        case ValueKind::string: return std::string(key->s());
        case ValueKind::integer: return std::to_string(key->i());
        default: return repr(key, 60, 2);
    }
}

Checkpoint::~Checkpoint() = default;
Checkpoint::Checkpoint(std::unique_ptr<Contents> contents) : m(std::move(contents)) {}
const std::string& Checkpoint::path() const { return m->path; }
Format Checkpoint::format() const { return m->format; }
const std::string& Checkpoint::zip_root() const { return m->zip_root; }
const std::string& Checkpoint::byteorder() const { return m->byteorder; }
bool Checkpoint::byteorder_recorded() const { return m->byteorder_recorded; }
const std::string& Checkpoint::version() const { return m->version; }
const std::vector<std::pair<std::string, int>>& Checkpoint::type_sizes() const { return m->type_sizes; }
uint8_t Checkpoint::pickle_protocol() const { return m->protocol; }
uint64_t Checkpoint::metadata_size() const { return m->metadata_size; }
const Value* Checkpoint::root() const { return m->root; }
const std::vector<StorageInfo>& Checkpoint::storages() const { return m->storages; }
const std::vector<TensorInfo>& Checkpoint::tensors() const { return m->tensors; }
const std::vector<Entry>& Checkpoint::entries() const { return m->entries; }
const StateDict& Checkpoint::state_dict() const { return m->state_dict; }
const std::vector<GlobalRef>& Checkpoint::globals() const { return m->globals; }
const std::vector<Problem>& Checkpoint::problems() const { return m->problems; }
const std::vector<RecordInfo>& Checkpoint::records() const { return m->records; }
const std::vector<std::string>& Checkpoint::shards() const { return m->shard_names; }
const std::optional<DistInfo>& Checkpoint::dist() const { return m->dist; }

std::vector<std::string> Checkpoint::files_read() const {
    std::vector<std::string> out{m->path};
    for (const auto& shard : m->shards) {
        std::vector<std::string> more = shard->files_read();
        out.insert(out.end(), more.begin(), more.end());
    }
    if (m->dist)
        for (const std::string& f : m->dist->files) out.push_back(m->dist->dir + "/" + f);
    return out;
}
const std::vector<std::pair<std::string, std::string>>& Checkpoint::metadata() const { return m->metadata; }
const MappedFile& Checkpoint::file() const { return *m->file; }
const std::string& Checkpoint::pickle_record() const { return m->pickle_record; }
const PickleTrace* Checkpoint::pickle_trace() const { return m->trace.get(); }
void Checkpoint::drop_pickle_trace() { m->trace.reset(); }
ByteView Checkpoint::pickle_bytes() const { return m->pickle ? m->pickle->view() : ByteView{}; }
const std::vector<std::pair<uint8_t, uint64_t>>& Checkpoint::pickle_opcodes() const { return m->pickle_opcodes; }
uint64_t Checkpoint::file_size() const {
    if (m->dist) return m->dist->bytes;
    return m->span ? m->span : m->file ? m->file->size() : 0;
}

size_t Checkpoint::record_count() const { return m->records.size(); }

const ZipArchive& Checkpoint::zip() const {
    if (!m->zip) throw Error(ErrorKind::unsupported, m->path, std::string("a ") + format_name(m->format) + " file has no zip archive");
    return *m->zip;
}

const MappedFile& Checkpoint::Contents::record_file(size_t i) const {
    if (dist) {
        if (records[i].pieces.empty()) throw Error(ErrorKind::usage, path, "record " + std::string(records[i].name) + " is empty: no file holds it");
        return *records[i].pieces.front().file;
    }
    if (!shards.empty()) return shards[record_owner[i].first]->record_file(record_owner[i].second);
    return *file;
}
const MappedFile& Checkpoint::record_file(size_t i) const { return m->record_file(i); }

RecordData Checkpoint::Contents::record_data(size_t i) const {
    if (dist) return detail::gather(records[i]);
    if (!shards.empty()) return shards[record_owner[i].first]->record_data(record_owner[i].second);
    if (zip) return zip->record_data(zip->entries()[i]);
    auto [begin, end] = record_ranges[i];
    return RecordData(*bytes().sub(begin, end - begin));
}
RecordData Checkpoint::record_data(size_t i) const { return m->record_data(i); }

std::optional<uint64_t> Checkpoint::Contents::record_file_offset(size_t i) const {
    if (dist) return std::nullopt;  // gathered: no one range to copy from
    if (!shards.empty()) return shards[record_owner[i].first]->record_file_offset(record_owner[i].second);
    if (!zip) return base + record_ranges[i].first;
    const ZipEntry& e = zip->entries()[i];
    if (e.method != 0) return std::nullopt;
    if (span) return base + zip->data_offset(e);  // embedded: the fd's offsets are not the archive's
    return zip->data_offset(e, file->fd());
}
std::optional<uint64_t> Checkpoint::record_file_offset(size_t i) const { return m->record_file_offset(i); }

std::optional<size_t> Checkpoint::Contents::record_index(std::string_view name) const {
    if (records_are_zip_entries) {
        const ZipEntry* e = zip->find(name);
        if (!e) return std::nullopt;
        return static_cast<size_t>(e - zip->entries().data());
    }
    size_t pos = record_by_name.find(name, [this](size_t i) -> std::string_view { return records[i].name; });
    if (pos == StringIndex::npos) return std::nullopt;
    return pos;
}
std::optional<size_t> Checkpoint::record_index(std::string_view name) const { return m->record_index(name); }

void Checkpoint::Contents::index_storage_records() {
    if (storage_records.size() == storages.size()) return;  // the reader found them
    storage_records.assign(storages.size(), k_no_record);
    if (records.size() >= k_no_record) return storage_records.clear();  // looked up by name, as before
    for (size_t i = 0; i < storages.size(); ++i)
        if (auto r = record_index(storages[i].record)) storage_records[i] = static_cast<uint32_t>(*r);
}

std::optional<size_t> Checkpoint::storage_record(size_t storage) const {
    if (m->storage_records.size() == m->storages.size()) {
        uint32_t r = m->storage_records.at(storage);
        if (r == Contents::k_no_record) return std::nullopt;
        return r;
    }
    return m->record_index(m->storages.at(storage).record);
}

void Checkpoint::Contents::keep_records_only() {
    root = nullptr;
    std::vector<StorageInfo>().swap(storages);
    std::vector<uint32_t>().swap(storage_records);
    std::vector<TensorInfo>().swap(tensors);
    std::vector<Entry>().swap(entries);
    state_dict = StateDict();
    std::vector<GlobalRef>().swap(globals);
    std::vector<Problem>().swap(problems);
    std::vector<std::pair<std::string, std::string>>().swap(metadata);
    trace.reset();
    pickle.reset();
    arena.clear();
}

std::string_view Checkpoint::Contents::add_record(RecordInfo record) {
    record.name = names.keep(record.name);
    std::string_view kept = record.name;
    add_record_named_in_file(std::move(record));
    return kept;
}

std::string_view Checkpoint::Contents::keep(std::string_view text) {
    if (text.empty()) return {};
    if (text == "cpu") return "cpu";
    return names.keep(text);
}

void Checkpoint::Contents::add_zip_records() {
    const auto& entries = zip->entries();
    records.reserve(records.size() + entries.size());
    // A CRC-32 of 0 on a record that is not empty is torch 2.x saying it wrote none
    // (set_crc32_options(False), or skip_data()'s storages), not a checksum: the record is unchecked.
    for (const auto& e : entries) records.push_back({e.name, e.size, e.crc32 != 0 || e.size == 0, e.crc32, {}});
    records_are_zip_entries = records.size() == entries.size();
    if (!records_are_zip_entries) index_records(records.size() - entries.size());  // records before the zip's
}

void Checkpoint::Contents::index_records(size_t from) {
    for (size_t i = from; i < records.size(); ++i)
        record_by_name.insert(records[i].name, i, [this](size_t k) -> std::string_view { return records[k].name; });
}

void Checkpoint::Contents::add_record_named_in_file(RecordInfo record) {
    if (records_are_zip_entries) {  // the zip's index no longer covers every record: one of their own
        records_are_zip_entries = false;
        index_records(0);
    }
    records.push_back(std::move(record));
    index_records(records.size() - 1);
}
bool Checkpoint::zip64() const { return m->zip && m->zip->zip64(); }
size_t Checkpoint::compressed_records() const {
    if (!m->zip) return 0;
    size_t n = 0;
    for (const auto& e : m->zip->entries()) n += e.method != 0;
    return n;
}

std::vector<size_t> Checkpoint::storage_users() const {
    std::vector<size_t> users(m->storages.size(), 0);
    // A tensor's value is its row of the table: the same tensor object reached twice is one index.
    std::vector<bool> seen(m->tensors.size(), false);
    for (const Entry& e : m->entries)
        if (e.tensor && m->tensors[*e.tensor].strided_view() && !seen[*e.tensor]) {
            seen[*e.tensor] = true;
            ++users[m->tensors[*e.tensor].storage];
        }
    return users;
}

uint64_t Checkpoint::Contents::tensor_bytes(const TensorInfo& t) const {
    if (t.no_data) return 0;
    if (t.layout == Layout::strided) return t.nbytes();
    uint64_t bytes = 0;
    for (const TensorPart& p : t.extra->parts) bytes += tensor_bytes(tensors[p.tensor]);
    return bytes;
}
uint64_t Checkpoint::tensor_bytes(const TensorInfo& t) const { return m->tensor_bytes(t); }

std::vector<std::vector<int64_t>> Checkpoint::component_shapes(const TensorInfo& t) const {
    std::vector<std::vector<int64_t>> out;
    if (t.extra)
        for (size_t i : t.extra->components) out.push_back(m->tensors[i].shape);
    return out;
}

std::vector<Problem> Checkpoint::frame_problems() const {
    std::vector<Problem> out;
    if (m->dist) return out;  // a merged view: verify checks each archive it holds
    for (size_t s = 0; s < m->shards.size(); ++s)
        for (Problem& p : m->shards[s]->frame_problems()) {
            p.message = m->shard_names[s] + ": " + p.message;
            out.push_back(std::move(p));
        }
    if (!m->zip || !m->shards.empty()) return out;
    // The frames are spread over the whole file, and each is checked against its name in the
    // directory: the pages read give way behind the reader in both (a file of 100,000 small tensors
    // would otherwise stay resident, 35 MiB and its 9 MiB directory, for two small reads a record).
    PagesBehind behind(m->file.get(), m->bytes());
    PagesBehind names(m->file.get(), m->zip->central_directory());
    for (const ZipEntry& e : m->zip->entries()) {
        behind.at(e.local_header_offset);
        names.at(e.central_offset - m->zip->central_directory_offset());
        bool readable = true;
        if (std::string why = m->zip->frame_problem(e, &readable); !why.empty())
            out.push_back({readable ? "record_descriptor" : "record_header", std::string(e.name), std::move(why)});
    }
    names.done();
    return out;
}

std::vector<size_t> Checkpoint::unreferenced_records() const {
    // By the first record of each name (record_index): whether a storage names it. A record not so
    // marked (only then) is looked up by its name, for a first record of the same name that is.
    // Names are read only for records no storage marks (none, in a file as torch.save writes it).
    std::vector<size_t> out;
    if (m->format == Format::safetensors) return out;
    std::vector<char> named(m->records.size());
    for (size_t s = 0; s < m->storages.size(); ++s)
        if (auto r = storage_record(s)) named[*r] = 1;
    std::string data_dir = m->zip_root + "/data/";
    for (size_t i = 0; i < m->records.size(); ++i)
        if (const RecordInfo& e = m->records[i];
            !named[i] && e.name.compare(0, data_dir.size(), data_dir) == 0 && !named[*record_index(e.name)])
            out.push_back(i);
    return out;
}

std::unique_ptr<Checkpoint> Checkpoint::open(const std::string& path, const OpenOptions& options) {
    return naming_file(path, [&]() -> std::unique_ptr<Checkpoint> {
        for (const FolderFormat& f : folder_formats())
            if (std::unique_ptr<Checkpoint> c = f.try_open(path, options)) return c;
        auto c = std::make_unique<Contents>();
        c->path = path;
        c->file = std::make_shared<MappedFile>(path);
        read_container(*c, options);
        return std::make_unique<Checkpoint>(std::move(c));
    });
}

}  // namespace ckpt
