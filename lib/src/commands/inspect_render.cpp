// The two renderings of an inspect report. The JSON shape is documented in docs/schema/.
#include <algorithm>
#include <ostream>
#include <stdexcept>
#include <string_view>

#include "ckpt/inspect.hpp"
#include "io/mapped_file.hpp"
#include "ckpt/report.hpp"
#include "io/json.hpp"

namespace ckpt {

namespace {

nlohmann::json totals_json(const Totals& t) {
    nlohmann::json by = nlohmann::json::object();
    for (const auto& d : t.by_dtype)
        by[d.dtype] = {{"tensors", d.tensors}, {"elements", d.elements}, {"bytes", d.bytes}};
    return {{"tensors", t.tensors}, {"elements", t.elements}, {"bytes", t.bytes}, {"by_dtype", by}};
}

}  // namespace

namespace {

// A merged view's storage: the byte ranges of the files it is gathered from (names relative to the folder).
nlohmann::json pieces_json(const Checkpoint& c, const StorageInfo& s) {
    nlohmann::json out = nlohmann::json::array();
    auto rec = c.record_index(s.record);
    if (!c.dist() || !rec) return out;
    const std::string& dir = c.dist()->dir;
    for (const RecordPiece& p : c.records()[*rec].pieces) {
        std::string f = p.file->path();
        if (f.size() > dir.size() && f.compare(0, dir.size(), dir) == 0 && f[dir.size()] == '/') f = f.substr(dir.size() + 1);
        nlohmann::json pj = {{"file", f}, {"offset", p.offset}, {"length", p.length}};
        if (p.from != p.to) pj["cast_from"] = dtype_name(p.from);
        out.push_back(std::move(pj));
    }
    return out;
}

nlohmann::json model_shape_json(const DistInfo& d) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [k, v] : d.model_shape) out[k] = v;
    return out;
}

nlohmann::json dist_json(const DistInfo& d) {
    return {{"layout", d.layout}, {"writer", d.writer}, {"dir", d.dir},
            {"tag", d.tag.empty() ? nlohmann::json(nullptr) : nlohmann::json(d.tag)},
            {"latest", d.latest.empty() ? nlohmann::json(nullptr) : nlohmann::json(d.latest)},
            {"tags", d.tags}, {"world_size", d.world_size}, {"files", d.files}, {"elements", d.elements},
            {"notes", d.notes},
            {"iteration", d.iteration ? nlohmann::json(*d.iteration) : nlohmann::json(nullptr)},
            {"parallel", d.parallel ? nlohmann::json{{"tensor", d.parallel->tensor}, {"pipeline", d.parallel->pipeline},
                                                     {"expert", d.parallel->expert}, {"virtual_pipeline", d.parallel->virtual_pipeline}}
                                    : nlohmann::json(nullptr)},
            {"model_shape", model_shape_json(d)},
            {"replicas", d.replicas.size()}};
}

// One element of "tensors". A tensor that is not a plain view of its storage says what it is:
// layout (sparse, nested), its parts (indices, values …), the shapes of a nested tensor's components
// (its "shape" is null: torch has none), the device of one saved without elements (storage null),
// a quantized tensor's scheme and parameters; a tensor subclass its class.
nlohmann::json tensor_json(const Checkpoint& c, const TensorRow& row) {
    const TensorInfo& t = c.tensors()[row.tensor];
    bool nested = t.nested();
    nlohmann::json tj = {{"key", row.key},
                         {"state_dict_key", row.name ? nlohmann::json(*row.name) : nlohmann::json(nullptr)},
                         {"dtype", dtype_name(t.dtype)},
                         {"shape", nested ? nlohmann::json(nullptr) : nlohmann::json(t.shape)},
                         {"stride", t.strided_view() ? nlohmann::json(t.stride) : nlohmann::json(nullptr)},
                         {"storage_offset", t.storage_offset},
                         {"numel", t.numel},
                         {"nbytes", c.tensor_bytes(t)},
                         {"storage", t.strided_view() ? nlohmann::json(c.storages()[t.storage].key) : nlohmann::json(nullptr)},
                         {"shared", row.shared},
                         {"contiguous", t.strided_view() && t.contiguous()},
                         {"requires_grad", t.requires_grad},
                         {"parameter", t.is_parameter}};
    if (!t.subclass.empty()) tj["subclass"] = t.subclass;
    if (t.layout != Layout::strided) tj["layout"] = layout_name(t.layout);
    if (nested) {
        tj["nested"] = true;
        tj["shapes"] = c.component_shapes(t);
    }
    if (t.no_data) tj["device"] = t.extra ? t.extra->device : "meta";
    if (t.extra && !t.extra->parts.empty()) {
        nlohmann::json parts = nlohmann::json::array();
        for (const TensorPart& p : t.extra->parts) {
            const TensorInfo& pt = c.tensors()[p.tensor];
            parts.push_back({{"name", p.name}, {"dtype", dtype_name(pt.dtype)}, {"shape", pt.shape},
                             {"storage", pt.strided_view() ? nlohmann::json(c.storages()[pt.storage].key) : nlohmann::json(nullptr)}});
        }
        tj["parts"] = std::move(parts);
    }
    if (t.quantized()) {
        const TensorExtra& e = *t.extra;
        nlohmann::json q = {{"scheme", e.qscheme}};
        if (e.axis < 0) q["scale"] = e.scale, q["zero_point"] = e.zero_point;
        else q["axis"] = e.axis;
        tj["quantization"] = std::move(q);
    }
    return tj;
}

// Everything but the elements of "tensors" and "storages", which `with_arrays` leaves empty.
nlohmann::json report_json(const InspectReport& r, bool with_arrays) {
    const Checkpoint& c = *r.checkpoint;
    nlohmann::json j = report_head("inspect");
    j["file"] = c.path();
    j["file_size"] = c.file_size();
    j["format"] = format_name(c.format());
    nlohmann::json metadata = nlohmann::json::object();
    for (const auto& [k, v] : c.metadata()) metadata[k] = v;
    j["metadata"] = std::move(metadata);
    j["shards"] = c.shards();
    j["distributed"] = c.dist() ? dist_json(*c.dist()) : nlohmann::json(nullptr);
    j["container"] = {{"root", c.zip_root()},
                      {"byteorder", c.byteorder()},
                      {"byteorder_recorded", c.byteorder_recorded()},
                      {"version", c.version()},
                      {"records", c.record_count()},
                      {"compressed_records", c.compressed_records()},
                      {"zip64", c.zip64()},
                      {"pickle_protocol", c.pickle_protocol()},
                      {"pickle_bytes", c.metadata_size()}};
    if (!c.type_sizes().empty()) {
        nlohmann::json ts = nlohmann::json::object();
        for (const auto& [name, size] : c.type_sizes()) ts[name] = size;
        j["container"]["type_sizes"] = std::move(ts);
    }
    const StateDict& sd = c.state_dict();
    if (sd.kind == StateDictKind::none) {
        j["state_dict"] = nullptr;
    } else {
        j["state_dict"] = sd.path;
    }
    j["state_dict_kind"] = state_dict_kind_name(sd.kind);

    nlohmann::json tensors = nlohmann::json::array();
    for (const auto& row : r.tensors) {
        if (!with_arrays) break;
        if (r.listed(row)) tensors.push_back(tensor_json(c, row));
    }
    j["tensors"] = std::move(tensors);

    nlohmann::json storages = nlohmann::json::array();
    for (const auto& s : c.storages()) {
        if (!with_arrays) break;
        storages.push_back({{"key", s.key},
                            {"dtype", dtype_name(s.dtype)},
                            {"numel", s.numel},
                            {"nbytes", s.nbytes()},
                            {"location", s.location},
                            {"record", s.record}});
        if (c.dist()) storages.back()["pieces"] = pieces_json(c, s);
    }
    j["storages"] = std::move(storages);

    nlohmann::json objects = nlohmann::json::array();
    for (const auto& o : r.objects) objects.push_back({{"key", o.key}, {"type", o.type}, {"repr", o.repr}});
    j["objects"] = std::move(objects);

    nlohmann::json globals = nlohmann::json::array();
    for (size_t k = 0; k < c.globals().size(); ++k) {
        const GlobalRef& g = c.globals()[k];
        GlobalClass cls = k < r.globals.size() ? r.globals[k].cls : g.cls;
        globals.push_back({{"name", g.full_name()},
                           {"known", global_is_known(cls)},
                           {"class", global_class_name(cls)},
                           {"count", g.count}});
    }
    j["globals"] = std::move(globals);
    j["weights_only"] = weights_only_json(r.weights_only);

    nlohmann::json optimizers = nlohmann::json::array();
    for (const auto& o : r.optimizers)
        optimizers.push_back({{"key", o.key},
                              {"param_groups", o.param_groups},
                              {"params", o.params},
                              {"states", o.states},
                              {"state_fields", o.state_fields},
                              {"hyperparameters", o.hyperparameters}});
    j["optimizers"] = std::move(optimizers);

    nlohmann::json hints = nlohmann::json::array();
    for (const auto& h : r.hints)
        hints.push_back({{"kind", h.kind}, {"message", h.message},
                         {"command", h.command.empty() ? nlohmann::json(nullptr) : nlohmann::json(h.command)}});
    j["hints"] = std::move(hints);
    nlohmann::json warnings = nlohmann::json::array();
    for (const auto& w : r.warnings) warnings.push_back({{"kind", w.kind}, {"message", w.message}});
    j["warnings"] = std::move(warnings);

    j["totals"] = {{"state_dict", totals_json(r.state_dict_totals)},
                   {"all", totals_json(r.all_totals)},
                   {"storage_bytes", r.storage_bytes}};
    return j;
}

// Writes JSON values exactly as nlohmann's dump(2) lays them out, at a given depth.
class JsonOut {
public:
    explicit JsonOut(std::ostream& out) : m_out(out) {}
    void string(std::string_view s) { append_json_string(m_buf, s, true); }
    void number(uint64_t v) { m_buf += std::to_string(v); }
    void number(int64_t v) { m_buf += std::to_string(v); }
    void boolean(bool b) { m_buf += b ? "true" : "false"; }
    void null() { m_buf += "null"; }
    void raw(std::string_view s) { m_buf += s; }
    void newline(int depth) {
        m_buf += '\n';
        m_buf.append(2 * static_cast<size_t>(depth), ' ');
    }
    // `"name": ` on a line of its own at `depth`, after a comma unless it is the first.
    void key(const char* name, int depth, bool first = false) {
        if (!first) m_buf += ',';
        newline(depth);
        m_buf += '"';
        m_buf += name;
        m_buf += "\": ";
    }
    void ints(const std::vector<int64_t>& v, int depth) {
        if (v.empty()) return raw("[]");
        m_buf += '[';
        for (size_t n = 0; n < v.size(); ++n) {
            if (n) m_buf += ',';
            newline(depth + 1);
            number(v[n]);
        }
        newline(depth);
        m_buf += ']';
    }
    // An object as an element of a top-level member's array ("tensors": [{…}, …]).
    void begin_element(bool& first) {
        raw(first ? "[" : ",");
        first = false;
        newline(2);
        raw("{");
    }
    // A whole element from a document, laid out as dump(2) lays it out at that depth.
    void element(bool& first, const nlohmann::json& j) {
        append_json_row(m_buf, j, 2, first);
        flush_if_full();
    }
    void end_element() {
        newline(2);
        raw("}");
        flush_if_full();
    }
    void end_array(bool empty) {
        if (empty) return raw("[]");
        newline(1);
        raw("]");
    }
    void flush_if_full() {
        if (m_buf.size() > (1u << 16)) flush();
    }
    void flush() {
        m_out.write(m_buf.data(), static_cast<std::streamsize>(m_buf.size()));
        m_buf.clear();
    }

private:
    std::ostream& m_out;
    std::string m_buf;
};

// The elements of the "tensors" array (depth 1 inside the report) as to_json builds them.
void write_tensors(const InspectReport& r, JsonOut& o) {
    const Checkpoint& c = *r.checkpoint;
    bool first = true;
    for (const auto& row : r.tensors) {
        if (!r.listed(row)) continue;
        const TensorInfo& t = c.tensors()[row.tensor];
        if (!t.plain()) {  // rare: the document's own layout
            o.element(first, tensor_json(c, row));
            continue;
        }
        const StorageInfo& s = c.storages()[t.storage];
        o.begin_element(first);
        o.key("contiguous", 3, true), o.boolean(t.contiguous());
        o.key("dtype", 3), o.string(dtype_name(t.dtype));
        o.key("key", 3), o.string(row.key);
        o.key("nbytes", 3), o.number(t.nbytes());
        o.key("numel", 3), o.number(t.numel);
        o.key("parameter", 3), o.boolean(t.is_parameter);
        o.key("requires_grad", 3), o.boolean(t.requires_grad);
        o.key("shape", 3), o.ints(t.shape, 3);
        o.key("shared", 3), o.boolean(row.shared);
        o.key("state_dict_key", 3);
        if (row.name) o.string(*row.name);
        else o.null();
        o.key("storage", 3), o.string(s.key);
        o.key("storage_offset", 3), o.number(t.storage_offset);
        o.key("stride", 3), o.ints(t.stride, 3);
        if (!t.subclass.empty()) o.key("subclass", 3), o.string(t.subclass);
        o.end_element();
    }
    o.end_array(first);
}

void write_storages(const InspectReport& r, JsonOut& o) {
    bool first = true;
    for (const auto& s : r.checkpoint->storages()) {
        o.begin_element(first);
        o.key("dtype", 3, true), o.string(dtype_name(s.dtype));
        o.key("key", 3), o.string(s.key);
        o.key("location", 3), o.string(s.location);
        o.key("nbytes", 3), o.number(s.nbytes());
        o.key("numel", 3), o.number(s.numel);
        if (r.checkpoint->dist()) {
            o.key("pieces", 3);
            nlohmann::json pj = pieces_json(*r.checkpoint, s);
            std::string text = pj.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
            std::string indented;  // at depth 3, as dump(2) lays a member out there
            for (char ch : text) {
                indented += ch;
                if (ch == '\n') indented.append(6, ' ');
            }
            o.raw(indented);
        }
        o.key("record", 3), o.string(s.record);
        o.end_element();
    }
    o.end_array(first);
}

}  // namespace

nlohmann::json to_json(const InspectReport& r) { return report_json(r, true); }

void write_json(const InspectReport& r, std::ostream& out) {
    // The document without the two arrays, then each array written where its empty "[]" stands.
    // Keys are sorted, and a line break followed by two spaces only ever starts a top-level key
    // (line breaks inside strings are escaped).
    std::string text = report_json(r, false).dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
    const std::string storages = "\n  \"storages\": []", tensors = "\n  \"tensors\": []";
    size_t at_storages = text.find(storages), at_tensors = text.find(tensors);
    if (at_storages == std::string::npos || at_tensors == std::string::npos || at_tensors < at_storages)
        throw std::logic_error("inspect JSON without its tensors and storages arrays");
    JsonOut o(out);
    o.raw(std::string_view(text).substr(0, at_storages + storages.size() - 2));
    write_storages(r, o);
    size_t after = at_storages + storages.size();
    o.raw(std::string_view(text).substr(after, at_tensors + tensors.size() - 2 - after));
    write_tensors(r, o);
    o.raw(std::string_view(text).substr(at_tensors + tensors.size()));
    o.raw("\n");
    o.flush();
}

namespace {

// Display width of UTF-8 text (every code point one column: the "×" in shapes).
size_t width(const std::string& s) {
    size_t n = 0;
    for (unsigned char ch : s) n += (ch & 0xc0) != 0x80;
    return n;
}
std::string pad(const std::string& s, size_t w) { return s + std::string(w > width(s) ? w - width(s) : 0, ' '); }

}  // namespace

void render_text(const InspectReport& r, std::ostream& out, const TextStyle& style) {
    const Checkpoint& c = *r.checkpoint;
    Paint paint{style.color};
    if (c.dist()) {
        const DistInfo& d = *c.dist();
        out << paint("1", c.path()) << ": " << d.writer;
        if (!d.tag.empty()) out << ", tag " << shown(d.tag) << (d.latest == d.tag ? " (latest)" : d.latest.empty() ? "" : " (latest: " + shown(d.latest) + ")");
        out << ", " << d.world_size << (d.world_size == 1 ? " rank" : " ranks") << ", " << d.files.size() << " files, "
            << human_bytes(c.file_size()) << "\n";
        if (d.tags.size() > 1) {
            out << "  tags:";
            for (const auto& t : d.tags) out << " " << shown(t);
            out << "\n";
        }
        if (d.parallel) {
            const DistInfo::Degrees& p = *d.parallel;
            out << "  ";
            if (d.iteration) out << "iteration " << *d.iteration << ", ";
            out << "tensor × pipeline × expert parallel " << p.tensor << " × " << p.pipeline << " × " << p.expert;
            if (p.virtual_pipeline > 1) out << ", " << p.virtual_pipeline << " virtual stages";
            out << "\n";
        }
        if (!d.model_shape.empty()) {
            out << "  model:";
            for (size_t k = 0; k < d.model_shape.size(); ++k) out << (k ? ", " : " ") << shown(d.model_shape[k].first) << " " << shown(d.model_shape[k].second);
            out << "\n";
        }
        out << "  merged view: " << human_count(d.elements) << " elements; `ckpt-tool merge` writes it as one file\n";
        for (const auto& n : d.notes) out << "  " << paint("33", "note") << " " << shown(n) << "\n";
    } else if (!c.shards().empty()) {
        out << paint("1", c.path()) << ": sharded checkpoint, " << c.shards().size() << " " << format_name(c.format())
            << " shards (" << shown(c.shards().front()) << (c.shards().size() > 1 ? " … " + shown(c.shards().back()) : "") << "), "
            << human_bytes(c.file_size()) << " index\n";
    } else if (c.format() == Format::safetensors) {
        out << paint("1", c.path()) << ": safetensors (header " << human_bytes(c.metadata_size()) << ", "
            << c.metadata().size() << " metadata entries), " << human_bytes(c.file_size()) << "\n";
        for (const auto& [k, v] : c.metadata()) out << "  " << shown(k) << ": " << shown(v) << "\n";
    } else if (c.format() == Format::torch_export) {
        out << paint("1", c.path()) << ": torch.export archive (schema " << shown(c.version())
            << "; its state dict and constants are read, the program is not), " << human_bytes(c.file_size()) << "\n";
    } else if (c.format() == Format::legacy) {
        out << paint("1", c.path()) << ": legacy torch format (protocol 1001, " << c.byteorder() << "-endian";
        for (const auto& [name, size] : c.type_sizes()) out << ", " << shown(name) << " " << size;
        out << "; torch < 1.6 or _use_new_zipfile_serialization=False), " << human_bytes(c.file_size()) << "\n";
    } else {
        std::string fmt = c.format() == Format::torchscript ? "TorchScript zip" : "torch zip";
        out << paint("1", c.path()) << ": " << fmt << " (root " << shown(c.zip_root()) << ", " << shown(c.byteorder())
            << "-endian";
        if (!c.version().empty()) out << ", version " << shown(c.version());
        if (c.compressed_records()) out << ", " << c.compressed_records() << " compressed records";
        out << "), " << human_bytes(c.file_size()) << "\n";
    }

    const StateDict& sd = c.state_dict();
    if (sd.kind == StateDictKind::none) {
        out << "state dict: none found\n";
    } else {
        std::string where = sd.path.empty() ? "top level" : "\"" + shown(sd.path) + "\"";
        if (sd.kind == StateDictKind::module) where += " (a pickled nn.Module)";
        if (sd.kind == StateDictKind::tree) where += " (TorchScript attributes)";
        out << "state dict: " << where << ", " << r.state_dict_totals.tensors << " tensors, "
            << human_count(r.state_dict_totals.elements) << " elements";
        if (sd.other_values) out << ", " << sd.other_values << " other values";
        out << "\n";
    }

    // The table: the state dict's tensors by name; every tensor by key with --all or without one.
    bool by_name = sd.kind != StateDictKind::none && !r.options.all;
    std::vector<const TensorRow*> rows;
    for (const auto& row : r.tensors)
        if ((!by_name || row.name) && r.listed(row)) rows.push_back(&row);
    if (!rows.empty()) {
        size_t wk = 3, wd = 5, ws = 5;
        for (const auto* row : rows) {
            const TensorInfo& t = c.tensors()[row->tensor];
            wk = std::max(wk, width(shown(by_name ? *row->name : row->key)) + (row->shared ? 2 : 0));
            wd = std::max(wd, dtype_name(t.dtype).size());
            ws = std::max(ws, width(tensor_shape_text(c, t)));
        }
        wk = std::min<size_t>(wk, 80);
        out << "\n  " << paint("1", pad("key", wk) + "  " + pad("dtype", wd) + "  " + pad("shape", ws) + "  size") << "\n";
        size_t head = rows.size(), tail = 0;
        if (!r.options.all && rows.size() > 40) {
            head = 25;
            tail = 10;
        }
        bool any_shared = false;
        auto line = [&](const TensorRow* row) {
            const TensorInfo& t = c.tensors()[row->tensor];
            std::string k = shown(by_name ? *row->name : row->key) + (row->shared ? " *" : "");
            any_shared = any_shared || row->shared;
            out << "  " << pad(k, wk) << "  " << pad(std::string(dtype_name(t.dtype)), wd) << "  "
                << pad(tensor_shape_text(c, t), ws) << "  " << human_bytes(c.tensor_bytes(t)) << "\n";
        };
        for (size_t i = 0; i < head; ++i) line(rows[i]);
        if (tail) {
            out << "  " << paint("2", "… " + std::to_string(rows.size() - head - tail) + " more (--all lists every one)") << "\n";
            for (size_t i = rows.size() - tail; i < rows.size(); ++i) line(rows[i]);
        }
        if (any_shared) out << "  " << paint("2", "* shares its storage with another tensor") << "\n";
        const Totals& tot = by_name ? r.state_dict_totals : r.all_totals;
        out << "\n ";
        for (const auto& d : tot.by_dtype)
            out << "  " << d.dtype << "  " << d.tensors << (d.tensors == 1 ? " tensor  " : " tensors  ")
                << human_bytes(d.bytes) << "  ";
        out << "\n";
    }
    if (by_name) {
        size_t others = 0;
        uint64_t bytes = 0;
        for (const auto& row : r.tensors)
            if (!row.name) {
                ++others;
                bytes += c.tensor_bytes(c.tensors()[row.tensor]);
            }
        if (others)
            out << "\nother tensors: " << others << " outside the state dict, " << human_bytes(bytes)
                << " (--all lists them)\n";
    }

    // The rest of a training checkpoint: optimizers summarised, other values one per line.
    bool first = true;
    auto section = [&]() {
        if (first) out << "\n";
        first = false;
    };
    for (const auto& o : r.optimizers) {
        section();
        out << paint("1", o.key.empty() ? "optimizer" : o.key) << ": " << o.param_groups
            << (o.param_groups == 1 ? " param group" : " param groups");
        if (!o.hyperparameters.empty()) out << " (" << shown(o.hyperparameters) << ")";
        out << ", state for " << o.states << " of " << o.params << " params";
        if (!o.state_fields.empty()) {
            out << " (";
            for (size_t i = 0; i < o.state_fields.size(); ++i) out << (i ? ", " : "") << shown(o.state_fields[i]);
            out << ")";
        }
        out << "\n";
    }
    size_t values = 0, skipped = 0;
    for (const auto& o : r.objects) {
        bool in_optimizer = false;
        for (const auto& opt : r.optimizers)
            in_optimizer = in_optimizer || opt.key.empty() || o.key == opt.key ||
                           o.key.rfind(opt.key + ".", 0) == 0;
        if (in_optimizer) continue;
        if (!r.options.all && values >= 30) {
            ++skipped;
            continue;
        }
        section();
        out << paint("1", o.key.empty() ? "(root)" : o.key) << ": " << shown(o.repr) << "\n";
        ++values;
    }
    if (skipped) out << paint("2", "… " + std::to_string(skipped) + " more values (--all lists every one)") << "\n";

    if (!r.weights_only.empty() && r.weights_only.front().applies) {
        out << "\n";
        render_weights_only(r.weights_only, out, paint);
    }

    for (const auto& h : r.hints) {
        out << "\n" << paint("33", "hint: ") << shown(h.message);
        if (!h.command.empty()) out << "; to repair:\n      " << shown(h.command);
        out << "\n";
    }
    if (!r.warnings.empty()) out << "\n";
    for (const auto& w : r.warnings)
        out << paint(w.kind == "dangerous_global" ? "31;1" : "31", "warning: ") << shown(w.message) << "\n";
}

}  // namespace ckpt
