#include "formats/safetensors.hpp"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "base/string_index.hpp"
#include "ckpt/error.hpp"
#include "io/json.hpp"
#include "formats/format.hpp"

namespace ckpt {

namespace {

[[noreturn]] void broken(const std::string& what, uint64_t offset = 0) {
    throw Error(ErrorKind::corrupt, "", "safetensors: " + what, offset);
}

// The header read in one pass of nlohmann's SAX parser: each tensor's fields as given, __metadata__'s
// members, the names in order; read_safetensors checks them after the parse, in header order and
// rule by rule in the order it lists them, as it did over a document.
// No document: a DOM of 1,000,000 tensors held some 3 KB a tensor, and looking each name up in it
// (a std::map) cost more than the parse (docs/performance.md).
struct HeaderReader : nlohmann::json_sax<nlohmann::json> {
    // A tensor's fields as the header gave them (the last of a repeated field wins, as in a document).
    struct Fields {
        std::string name;
        bool is_object = true;
        int dtype_kind = 0;  // 0: absent, 1: a string, 2: something else
        std::string dtype;
        // In place, no allocation for the usual tensor: the dimensions (as given, unsigned, in
        // int64 slots: read back as uint64) and the first two offsets with their count.
        bool shape_is_array = false, shape_ok = true;
        Dims shape;
        bool offsets_is_array = false, offsets_ok = true;
        uint64_t offsets[2] = {0, 0};
        size_t offset_count = 0;
    };
    enum class Field { none, dtype, shape, offsets };

    std::vector<Fields> tensors;
    std::vector<std::pair<std::string, std::string>> metadata;
    std::vector<bool> metadata_string;  // per member: its (last) value is a string
    bool metadata_not_object = false;
    size_t metadata_place = 0;     // how many tensor names come before __metadata__
    std::string duplicate;         // the first name given twice
    StringIndex names;           // the tensors' names, by row of tensors (no copy of a name)
    bool metadata_seen = false;
    std::unordered_map<std::string, size_t> metadata_at;
    bool root_is_object = false;
    bool out_of_range = false;
    uint64_t error_byte = 0;

    int depth = 0;
    bool in_metadata = false;  // depth 1 value: __metadata__
    Field field = Field::none;  // depth 2 key inside a tensor's object
    int field_depth = 0;        // nesting below the field's array (a value inside an element)
    std::string member;          // depth 2 key inside __metadata__

    void top_key(std::string& k) {
        in_metadata = k == "__metadata__";
        bool fresh = true;
        if (in_metadata) {
            fresh = !metadata_seen;
            if (fresh) metadata_place = tensors.size();
            metadata_seen = true;
        } else {
            tensors.emplace_back();
            tensors.back().name = std::move(k);
            fresh = names.insert(tensors.back().name, tensors.size() - 1,
                                 [this](size_t i) -> std::string_view { return tensors[i].name; }).second;
        }
        if (!fresh && duplicate.empty()) duplicate = in_metadata ? "__metadata__" : tensors.back().name;
    }
    // A scalar or container start at `depth` (before any increment).
    void value(bool is_string, std::string* text, bool is_unsigned, uint64_t u, bool container) {
        if (depth == 0) {
            root_is_object = false;
            return;
        }
        if (!root_is_object) return;  // inside a top level that is no object: refused as a whole
        if (depth == 1) {  // a name's whole value
            if (in_metadata) metadata_not_object = true;
            else tensors.back().is_object = false;
            return;
        }
        if (in_metadata) {
            if (depth == 2) {
                auto [it, fresh] = metadata_at.emplace(member, metadata.size());
                if (fresh) metadata.push_back({member, std::string()}), metadata_string.push_back(false);
                metadata_string[it->second] = is_string;
                if (is_string) metadata[it->second].second = std::move(*text);
            }
            return;
        }
        Fields& t = tensors.back();
        if (depth == 2) {  // a field's value
            if (field == Field::dtype) {
                t.dtype_kind = is_string ? 1 : 2;
                if (is_string) t.dtype = std::move(*text);
            } else if (field == Field::shape) {
                t.shape_is_array = false;
            } else if (field == Field::offsets) {
                t.offsets_is_array = false;
            }
            return;
        }
        if (depth == 3 && field_depth == 0) {  // an element of shape or data_offsets
            if (field == Field::shape) {
                if (is_unsigned && !container) t.shape.push_back(static_cast<int64_t>(u));
                else t.shape_ok = false;
            } else if (field == Field::offsets) {
                if (t.offset_count < 2) t.offsets[t.offset_count] = u;
                ++t.offset_count;
                if (!is_unsigned || container) t.offsets_ok = false;
            }
        }
    }

    bool key(string_t& k) override {
        if (!root_is_object) return true;
        if (depth == 1) top_key(k);
        else if (depth == 2 && in_metadata) member = k;
        else if (depth == 2) field = k == "dtype" ? Field::dtype : k == "shape" ? Field::shape : k == "data_offsets" ? Field::offsets : Field::none;
        return true;
    }
    bool start_object(std::size_t) override {
        if (depth == 0) root_is_object = true;
        else if (depth != 1) value(false, nullptr, false, 0, true);  // at depth 1, the object a name should hold
        return enter();
    }
    bool end_object() override { return leave(); }
    // Into and out of a container: below a field's array, the nesting of its elements is counted.
    bool enter() {
        if (depth >= 3) ++field_depth;
        ++depth;
        return true;
    }
    bool leave() {
        --depth;
        if (depth >= 3) --field_depth;
        return true;
    }
    bool start_array(std::size_t) override {
        if (root_is_object && depth == 2 && !in_metadata && (field == Field::shape || field == Field::offsets)) {
            Fields& t = tensors.back();
            if (field == Field::shape) {
                t.shape_is_array = true, t.shape_ok = true;
                t.shape.clear();
            } else {
                t.offsets_is_array = true, t.offsets_ok = true;
                t.offset_count = 0;
            }
        } else {
            value(false, nullptr, false, 0, true);
        }
        return enter();
    }
    bool end_array() override { return leave(); }
    bool null() override { return value(false, nullptr, false, 0, false), true; }
    bool boolean(bool) override { return value(false, nullptr, false, 0, false), true; }
    bool number_integer(number_integer_t) override { return value(false, nullptr, false, 0, false), true; }
    bool number_unsigned(number_unsigned_t u) override { return value(false, nullptr, true, u, false), true; }
    bool number_float(number_float_t f, const string_t&) override {
        if (!std::isfinite(f)) return out_of_range = true, false;  // as the parser does itself (out_of_range.406)
        return value(false, nullptr, false, 0, false), true;
    }
    bool string(string_t& s) override { return value(true, &s, false, 0, false), true; }
    bool binary(binary_t&) override { return value(false, nullptr, false, 0, false), true; }
    bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) override {
        auto* pe = dynamic_cast<const nlohmann::detail::parse_error*>(&e);
        error_byte = pe ? pe->byte : position;
        if (dynamic_cast<const nlohmann::detail::out_of_range*>(&e)) out_of_range = true;  // out_of_range.406
        return false;
    }
};

}  // namespace

namespace {
const std::pair<std::string_view, DType> k_names[] = {
        {"BOOL", DType::boolean}, {"U8", DType::uint8},     {"I8", DType::int8},
        {"I16", DType::int16},    {"U16", DType::uint16},   {"I32", DType::int32},
        {"U32", DType::uint32},   {"I64", DType::int64},    {"U64", DType::uint64},
        {"F16", DType::float16},  {"BF16", DType::bfloat16}, {"F32", DType::float32},
        {"F64", DType::float64},  {"C64", DType::complex64}, {"F8_E4M3", DType::float8_e4m3fn},
        {"F8_E5M2", DType::float8_e5m2}, {"F8_E8M0", DType::float8_e8m0fnu}};
}  // namespace

std::optional<DType> dtype_from_safetensors(std::string_view name) {
    for (const auto& [n, d] : k_names)
        if (n == name) return d;
    return std::nullopt;
}

std::optional<std::string_view> safetensors_dtype_name(DType dtype) {
    for (const auto& [n, d] : k_names)
        if (d == dtype) return n;
    return std::nullopt;
}

bool sniff_safetensors(ByteView file) {
    if (file.size < 10) return false;
    uint64_t n = load_le(file.data, 8);
    return n >= 2 && n <= file.size - 8 && file.data[8] == '{';
}

SafetensorsHeader read_safetensors(ByteView file) {
    SafetensorsHeader h;
    if (file.size < 8) broken("file shorter than the 8-byte header length");
    h.header_size = load_le(file.data, 8);
    if (h.header_size > k_safetensors_max_header)
        throw Error(ErrorKind::limit, "", "safetensors: header of " + std::to_string(h.header_size) +
                                              " bytes, over the format's limit of 100,000,000", 0);
    if (h.header_size > file.size - 8)
        broken("header length " + std::to_string(h.header_size) + " runs past the end of the file (" +
                   std::to_string(file.size) + " bytes; truncated?)", 0);
    const uint8_t* text = file.data + 8;
    HeaderReader r;
    if (!nlohmann::json::sax_parse(text, text + h.header_size, &r)) {
        if (r.out_of_range) broken("header holds a number out of range", 8);  // found by fuzz_safetensors
        broken("header is not valid JSON (at header byte " + std::to_string(r.error_byte) + ")", 8);
    }
    if (!r.root_is_object) broken("header is not a JSON object", 8);
    if (!r.duplicate.empty()) broken("name \"" + r.duplicate + "\" appears twice in the header", 8);

    uint64_t buffer = 8 + h.header_size;
    h.tensors.reserve(r.tensors.size());
    // In header order, __metadata__ in its place among the tensors: the first broken rule is the one said.
    bool metadata_checked = !r.metadata_seen;
    auto check_metadata = [&] {
        if (r.metadata_not_object) broken("__metadata__ is not an object of strings (a tensor named __metadata__?)", 8);
        for (size_t m = 0; m < r.metadata.size(); ++m)
            if (!r.metadata_string[m]) broken("__metadata__[\"" + r.metadata[m].first + "\"] is not a string", 8);
        h.metadata = std::move(r.metadata);
        metadata_checked = true;
    };
    for (size_t i = 0; i < r.tensors.size(); ++i) {
        if (!metadata_checked && i == r.metadata_place) check_metadata();
        HeaderReader::Fields& f = r.tensors[i];
        const std::string& name = f.name;
        auto where = [&](const std::string& what) { broken("tensor \"" + name + "\": " + what, 8); };
        if (!f.is_object) where("entry is not an object");
        if (f.dtype_kind != 1) where("no \"dtype\" string");
        if (!f.shape_is_array) where("no \"shape\" list");
        if (!f.offsets_is_array || f.offset_count != 2) where("no \"data_offsets\" pair");
        SafetensorsTensor t;
        const std::string& dt = f.dtype;
        auto d = dtype_from_safetensors(dt);
        if (!d) throw Error(ErrorKind::unsupported, "", "safetensors: tensor \"" + name + "\": unknown dtype \"" + dt + "\"", 8);
        t.dtype = *d;
        t.numel = 1;
        if (!f.shape_ok) where("\"shape\" holds something other than non-negative integers");
        t.shape.reserve(f.shape.size());
        for (int64_t given : f.shape) {
            uint64_t n = static_cast<uint64_t>(given);
            if (n > static_cast<uint64_t>(INT64_MAX)) where("dimension too large");
            auto p = checked_mul(t.numel, n);
            if (!p) where("element count overflows");
            t.numel = *p;
            t.shape.push_back(static_cast<int64_t>(n));
        }
        if (!f.offsets_ok) where("\"data_offsets\" are not non-negative integers");
        uint64_t b = f.offsets[0], e = f.offsets[1];
        auto bytes = checked_mul(t.numel, dtype_size(t.dtype));
        if (!bytes || e < b || e - b != *bytes)
            where("data_offsets [" + std::to_string(b) + ", " + std::to_string(e) + ") hold " +
                  std::to_string(e >= b ? e - b : 0) + " bytes, but " + std::to_string(t.numel) + " × " + dt +
                  " needs " + (bytes ? std::to_string(*bytes) : std::string("more than 2^64")));
        auto fb = checked_add(buffer, b), fe = checked_add(buffer, e);
        if (!fb || !fe || *fe > file.size)
            where("data_offsets run past the end of the file (truncated?)");
        t.begin = *fb;
        t.end = *fe;
        t.name = std::move(f.name);
        h.tensors.push_back(std::move(t));
    }
    if (!metadata_checked) check_metadata();

    // The tensors tile the buffer exactly: sorted by offset, each begins where the previous ended.
    std::vector<const SafetensorsTensor*> by_offset;
    for (const auto& t : h.tensors) by_offset.push_back(&t);
    std::stable_sort(by_offset.begin(), by_offset.end(), [](const SafetensorsTensor* a, const SafetensorsTensor* b) {
        return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
    });
    uint64_t at = buffer;
    for (const SafetensorsTensor* t : by_offset) {
        if (t->begin > at) broken("gap in the data buffer before tensor \"" + t->name + "\" (bytes " +
                                      std::to_string(at - buffer) + " to " + std::to_string(t->begin - buffer) + ")", at);
        if (t->begin < at) broken("tensor \"" + t->name + "\" overlaps the tensor before it", t->begin);
        at = t->end;
    }
    if (at != file.size)
        broken(std::to_string(file.size - at) + " bytes after the last tensor: the buffer does not end at the end of the file", at);
    return h;
}

SafetensorsHeaderWriter::SafetensorsHeaderWriter(const std::vector<std::pair<std::string, std::string>>* metadata) {
    m_text = "{";
    if (!metadata) return;
    std::unordered_map<std::string_view, size_t> at;  // a key's place among the members
    std::vector<std::pair<std::string_view, std::string_view>> members;
    for (const auto& [k, v] : *metadata) {
        auto [it, fresh] = at.emplace(k, members.size());
        if (fresh) members.push_back({k, v});
        else members[it->second].second = v;
    }
    m_text += "\"__metadata__\":{";
    for (size_t i = 0; i < members.size(); ++i) {
        if (i) m_text += ',';
        append_json_string(m_text, members[i].first, false);
        m_text += ':';
        append_json_string(m_text, members[i].second, false);
    }
    m_text += '}';
}

void SafetensorsHeaderWriter::add(std::string_view name, DType dtype, const Dims& shape, uint64_t begin,
                                  uint64_t end) {
    if (m_text.size() > 1) m_text += ',';
    append_json_string(m_text, name, false);
    m_text.append(":{\"dtype\":\"").append(safetensors_dtype_name(dtype).value()).append("\",\"shape\":[");
    for (size_t d = 0; d < shape.size(); ++d) m_text.append(d ? "," : "").append(std::to_string(shape[d]));
    m_text.append("],\"data_offsets\":[").append(std::to_string(begin)).append(",");
    m_text.append(std::to_string(end)).append("]}");
}

std::string SafetensorsHeaderWriter::finish() {
    m_text += '}';
    m_text.append((8 - m_text.size() % 8) % 8, ' ');
    return le_bytes(m_text.size(), 8) + m_text;
}

// safetensors: every tensor is its own storage (a record: its byte range), contiguous, at offset 0;
// the value tree is one dict of name → tensor, so the rest of the model (keys, state dict) is the
// same as for a torch.save state dict.
void read_safetensors_file(Checkpoint::Contents& c, const OpenOptions&) {
    SafetensorsHeader h = read_safetensors(c.bytes());
    c.format = Format::safetensors;
    c.metadata = std::move(h.metadata);
    c.metadata_size = h.header_size;  // the header plays the pickle's part
    Value* root = c.arena.make(ValueKind::dict, 8);
    size_t n = c.tensors.size() + h.tensors.size();
    c.storages.reserve(n);
    c.tensors.reserve(n);
    c.records.reserve(n);
    c.record_ranges.reserve(n);
    c.record_by_name.reserve(n);
    for (SafetensorsTensor& st : h.tensors) {
        StorageInfo s;
        s.key = s.record = c.add_record({st.name, st.end - st.begin, false, 0, {}});
        s.dtype = st.dtype;
        s.numel = st.numel;
        s.location = "cpu";
        s.record_present = true;
        s.record_size = st.end - st.begin;
        TensorInfo t;
        t.dtype = st.dtype;
        t.shape = st.shape;
        t.stride.assign(st.shape.size(), 1);
        for (size_t d = st.shape.size(); d-- > 1;) t.stride[d - 1] = t.stride[d] * std::max<int64_t>(st.shape[d], 1);
        t.storage = c.storages.size();
        t.rebuild = "safetensors";
        t.numel = st.numel;
        t.extent = st.numel;
        Value* key = c.arena.make(ValueKind::string, 8);
        key->set_s(c.arena.own(st.name));
        Value* tv = c.arena.make(ValueKind::tensor, st.begin);
        tv->set_i(static_cast<int64_t>(c.tensors.size()));
        tv->set_s(dtype_name(st.dtype));  // static text
        c.arena.append_entry(root, key, tv);
        c.record_ranges.push_back({st.begin, st.end});
        c.storages.push_back(std::move(s));
        c.tensors.push_back(std::move(t));
    }
    // A tensor tied to another is stored once, its second name in __metadata__ as "alias": "kept"
    // (safetensors' save_model, and convert, write it so): the alias is the kept tensor's entry again,
    // as in the state dict it was written from (one tensor at two keys), so every command sees both.
    if (!c.metadata.empty()) {
        std::unordered_map<std::string_view, size_t> tensor_of;  // name → index into c.tensors
        for (size_t i = 0; i < h.tensors.size(); ++i) tensor_of.emplace(h.tensors[i].name, n - h.tensors.size() + i);
        for (const auto& [alias, kept] : c.metadata) {
            auto k = tensor_of.find(kept);
            if (k == tensor_of.end() || tensor_of.count(alias)) continue;
            Value* key = c.arena.make(ValueKind::string, 8);
            key->set_s(c.arena.own(alias));
            Value* tv = c.arena.make(ValueKind::tensor, c.record_ranges[c.tensors[k->second].storage].first);
            tv->set_i(static_cast<int64_t>(k->second));
            tv->set_s(dtype_name(c.tensors[k->second].dtype));
            c.arena.append_entry(root, key, tv);
        }
    }
    c.root = root;
}

}  // namespace ckpt
