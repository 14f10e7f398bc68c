#include "formats/safetensors.hpp"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "ckpt/error.hpp"
#include "io/json.hpp"
#include "formats/format.hpp"

namespace ckpt {

namespace {

[[noreturn]] void broken(const std::string& what, uint64_t offset = 0) {
    throw Error(ErrorKind::corrupt, "", "safetensors: " + what, offset);
}

// The keys of a header's top-level object in order (the first of a repeated one, and which was
// repeated), and the keys of its __metadata__ object; nothing else is kept.
struct HeaderKeys : nlohmann::json_sax<nlohmann::json> {
    std::vector<std::string> order, metadata_order;
    std::string duplicate;
    std::unordered_set<std::string> seen, metadata_seen;
    int depth = 0;
    bool in_metadata = false;

    bool key(string_t& k) override {
        if (depth == 1) {
            in_metadata = k == "__metadata__";
            if (seen.insert(k).second) order.push_back(k);
            else if (duplicate.empty()) duplicate = k;
        } else if (depth == 2 && in_metadata && metadata_seen.insert(k).second) {
            metadata_order.push_back(k);
        }
        return true;
    }
    bool start_object(std::size_t) override { return ++depth, true; }
    bool end_object() override { return --depth, true; }
    bool start_array(std::size_t) override { return ++depth, true; }
    bool end_array() override { return --depth, true; }
    bool null() override { return true; }
    bool boolean(bool) override { return true; }
    bool number_integer(number_integer_t) override { return true; }
    bool number_unsigned(number_unsigned_t) override { return true; }
    bool number_float(number_float_t, const string_t&) override { return true; }
    bool string(string_t&) override { return true; }
    bool binary(binary_t&) override { return true; }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }
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
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | file.data[i];
    return n >= 2 && n <= file.size - 8 && file.data[8] == '{';
}

SafetensorsHeader read_safetensors(ByteView file) {
    SafetensorsHeader h;
    if (file.size < 8) broken("file shorter than the 8-byte header length");
    for (int i = 7; i >= 0; --i) h.header_size = (h.header_size << 8) | file.data[i];
    if (h.header_size > k_safetensors_max_header)
        throw Error(ErrorKind::limit, "", "safetensors: header of " + std::to_string(h.header_size) +
                                              " bytes, over the format's limit of 100,000,000", 0);
    if (h.header_size > file.size - 8)
        broken("header length " + std::to_string(h.header_size) + " runs past the end of the file (" +
                   std::to_string(file.size) + " bytes; truncated?)", 0);
    const uint8_t* text = file.data + 8;
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(text, text + h.header_size);
    } catch (const nlohmann::json::parse_error& e) {
        broken("header is not valid JSON (at header byte " + std::to_string(e.byte) + ")", 8);
    } catch (const nlohmann::json::exception&) {
        // out_of_range.406, a number too large for a double: found by fuzz_safetensors.
        broken("header holds a number out of range", 8);
    }
    // The tensors are listed in header order, which a second pass over the text gives (keys only,
    // no document): an ordered_json document searches its members on every insert, and the
    // parser's callback form scans the parent object at every object's end — both quadratic
    // (measured: convert of 100,000 tensors, which reads its output back, took 246 s).
    HeaderKeys keys;
    nlohmann::json::sax_parse(text, text + h.header_size, &keys);
    bool duplicate = !keys.duplicate.empty();
    const std::string& duplicate_name = keys.duplicate;
    const std::vector<std::string>& order = keys.order;
    const std::vector<std::string>& metadata_order = keys.metadata_order;
    if (!j.is_object()) broken("header is not a JSON object", 8);
    if (duplicate) broken("name \"" + duplicate_name + "\" appears twice in the header", 8);

    uint64_t buffer = 8 + h.header_size;
    for (const std::string& name : order) {
        const nlohmann::json& v = j.at(name);
        if (name == "__metadata__") {
            if (!v.is_object()) broken("__metadata__ is not an object of strings (a tensor named __metadata__?)", 8);
            for (const std::string& key : metadata_order) {
                const nlohmann::json& m = v.at(key);
                if (!m.is_string()) broken("__metadata__[\"" + key + "\"] is not a string", 8);
                h.metadata.push_back({key, m.get<std::string>()});
            }
            continue;
        }
        auto where = [&](const std::string& what) { broken("tensor \"" + name + "\": " + what, 8); };
        if (!v.is_object()) where("entry is not an object");
        if (!v.contains("dtype") || !v["dtype"].is_string()) where("no \"dtype\" string");
        if (!v.contains("shape") || !v["shape"].is_array()) where("no \"shape\" list");
        if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
            where("no \"data_offsets\" pair");
        SafetensorsTensor t;
        t.name = name;
        std::string dt = v["dtype"].get<std::string>();
        auto d = dtype_from_safetensors(dt);
        if (!d) throw Error(ErrorKind::unsupported, "", "safetensors: tensor \"" + name + "\": unknown dtype \"" + dt + "\"", 8);
        t.dtype = *d;
        t.numel = 1;
        for (const auto& dim : v["shape"]) {
            if (!dim.is_number_unsigned()) where("\"shape\" holds something other than non-negative integers");
            uint64_t n = dim.get<uint64_t>();
            if (n > static_cast<uint64_t>(INT64_MAX)) where("dimension too large");
            auto p = checked_mul(t.numel, n);
            if (!p) where("element count overflows");
            t.numel = *p;
            t.shape.push_back(static_cast<int64_t>(n));
        }
        const auto& off = v["data_offsets"];
        if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned()) where("\"data_offsets\" are not non-negative integers");
        uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
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
        h.tensors.push_back(std::move(t));
    }

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

void SafetensorsHeaderWriter::add(std::string_view name, DType dtype, const std::vector<int64_t>& shape, uint64_t begin,
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
        t.storage = c.storages.size();
        t.rebuild = "safetensors";
        t.numel = st.numel;
        t.extent = st.numel;
        Value* key = c.arena.make(ValueKind::string, 8);
        key->s = c.arena.own(st.name);
        Value* tv = c.arena.make(ValueKind::tensor, st.begin);
        tv->i = static_cast<int64_t>(c.tensors.size());
        tv->s = c.arena.own(std::string(dtype_name(st.dtype)));
        c.arena.append(root->entries, key);
        c.arena.append(root->entries, tv);
        c.add_record({st.name, st.end - st.begin, false, 0, {}});
        c.record_ranges.push_back({st.begin, st.end});
        c.storages.push_back(std::move(s));
        c.tensors.push_back(std::move(t));
    }
    c.root = root;
}

}  // namespace ckpt
