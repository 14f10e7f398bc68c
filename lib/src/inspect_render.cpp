// The two renderings of an inspect report. The JSON shape is documented in docs/schema/.
#include <algorithm>
#include <ostream>

#include "ckpt/inspect.hpp"
#include "ckpt/report.hpp"

namespace ckpt {

namespace {

nlohmann::json totals_json(const Totals& t) {
    nlohmann::json by = nlohmann::json::object();
    for (const auto& d : t.by_dtype)
        by[d.dtype] = {{"tensors", d.tensors}, {"elements", d.elements}, {"bytes", d.bytes}};
    return {{"tensors", t.tensors}, {"elements", t.elements}, {"bytes", t.bytes}, {"by_dtype", by}};
}

}  // namespace

nlohmann::json to_json(const InspectReport& r) {
    const Checkpoint& c = *r.checkpoint;
    nlohmann::json j;
    j["schema_version"] = k_schema_version;
    j["tool"] = tool_json();
    j["command"] = "inspect";
    j["file"] = c.path();
    j["file_size"] = c.file_size();
    j["format"] = format_name(c.format());
    nlohmann::json metadata = nlohmann::json::object();
    for (const auto& [k, v] : c.metadata()) metadata[k] = v;
    j["metadata"] = std::move(metadata);
    j["shards"] = c.shards();
    j["container"] = {{"root", c.zip_root()},
                      {"byteorder", c.byteorder()},
                      {"byteorder_recorded", c.byteorder_recorded()},
                      {"version", c.version()},
                      {"records", c.record_count()},
                      {"compressed_records", c.compressed_records()},
                      {"zip64", c.zip64()},
                      {"pickle_protocol", c.pickle_protocol()},
                      {"pickle_bytes", c.pickle_size()}};
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
        if (!r.listed(row)) continue;
        const TensorInfo& t = c.tensors()[row.tensor];
        const StorageInfo& s = c.storages()[t.storage];
        nlohmann::json tj = {{"key", row.key},
                             {"state_dict_key", row.name ? nlohmann::json(*row.name) : nlohmann::json(nullptr)},
                             {"dtype", dtype_name(t.dtype)},
                             {"shape", t.shape},
                             {"stride", t.stride},
                             {"storage_offset", t.storage_offset},
                             {"numel", t.numel},
                             {"nbytes", t.nbytes()},
                             {"storage", s.key},
                             {"shared", row.shared},
                             {"contiguous", t.contiguous()},
                             {"requires_grad", t.requires_grad},
                             {"parameter", t.is_parameter}};
        if (!t.subclass.empty()) tj["subclass"] = t.subclass;
        tensors.push_back(std::move(tj));
    }
    j["tensors"] = std::move(tensors);

    nlohmann::json storages = nlohmann::json::array();
    for (const auto& s : c.storages())
        storages.push_back({{"key", s.key},
                            {"dtype", dtype_name(s.dtype)},
                            {"numel", s.numel},
                            {"nbytes", s.nbytes()},
                            {"location", s.location},
                            {"record", s.record}});
    j["storages"] = std::move(storages);

    nlohmann::json objects = nlohmann::json::array();
    for (const auto& o : r.objects) objects.push_back({{"key", o.key}, {"type", o.type}, {"repr", o.repr}});
    j["objects"] = std::move(objects);

    nlohmann::json globals = nlohmann::json::array();
    for (const auto& g : c.globals())
        globals.push_back({{"name", g.full_name()},
                           {"known", global_is_known(g.cls)},
                           {"class", global_class_name(g.cls)},
                           {"count", g.count}});
    j["globals"] = std::move(globals);

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
    if (!c.shards().empty()) {
        out << paint("1", c.path()) << ": sharded checkpoint, " << c.shards().size() << " " << format_name(c.format())
            << " shards (" << c.shards().front() << (c.shards().size() > 1 ? " … " + c.shards().back() : "") << "), "
            << human_bytes(c.file_size()) << " index\n";
    } else if (c.format() == Format::safetensors) {
        out << paint("1", c.path()) << ": safetensors (header " << human_bytes(c.pickle_size()) << ", "
            << c.metadata().size() << " metadata entries), " << human_bytes(c.file_size()) << "\n";
        for (const auto& [k, v] : c.metadata()) out << "  " << k << ": " << v << "\n";
    } else if (c.format() == Format::legacy) {
        out << paint("1", c.path()) << ": legacy torch format (protocol 1001, " << c.byteorder() << "-endian";
        for (const auto& [name, size] : c.type_sizes()) out << ", " << name << " " << size;
        out << "; torch < 1.6 or _use_new_zipfile_serialization=False), " << human_bytes(c.file_size()) << "\n";
    } else {
        std::string fmt = c.format() == Format::torchscript ? "TorchScript zip" : "torch zip";
        out << paint("1", c.path()) << ": " << fmt << " (root " << c.zip_root() << ", " << c.byteorder()
            << "-endian";
        if (!c.version().empty()) out << ", version " << c.version();
        if (c.compressed_records()) out << ", " << c.compressed_records() << " compressed records";
        out << "), " << human_bytes(c.file_size()) << "\n";
    }

    const StateDict& sd = c.state_dict();
    if (sd.kind == StateDictKind::none) {
        out << "state dict: none found\n";
    } else {
        std::string where = sd.path.empty() ? "top level" : "\"" + sd.path + "\"";
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
            wk = std::max(wk, width(by_name ? *row->name : row->key) + (row->shared ? 2 : 0));
            wd = std::max(wd, dtype_name(t.dtype).size());
            ws = std::max(ws, width(shape_text(t.shape)));
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
            std::string k = (by_name ? *row->name : row->key) + (row->shared ? " *" : "");
            any_shared = any_shared || row->shared;
            out << "  " << pad(k, wk) << "  " << pad(std::string(dtype_name(t.dtype)), wd) << "  "
                << pad(shape_text(t.shape), ws) << "  " << human_bytes(t.nbytes()) << "\n";
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
                bytes += c.tensors()[row.tensor].nbytes();
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
        if (!o.hyperparameters.empty()) out << " (" << o.hyperparameters << ")";
        out << ", state for " << o.states << " of " << o.params << " params";
        if (!o.state_fields.empty()) {
            out << " (";
            for (size_t i = 0; i < o.state_fields.size(); ++i) out << (i ? ", " : "") << o.state_fields[i];
            out << ")";
        }
        out << "\n";
    }
    size_t shown = 0, skipped = 0;
    for (const auto& o : r.objects) {
        bool in_optimizer = false;
        for (const auto& opt : r.optimizers)
            in_optimizer = in_optimizer || opt.key.empty() || o.key == opt.key ||
                           o.key.rfind(opt.key + ".", 0) == 0;
        if (in_optimizer) continue;
        if (!r.options.all && shown >= 30) {
            ++skipped;
            continue;
        }
        section();
        out << paint("1", o.key.empty() ? "(root)" : o.key) << ": " << o.repr << "\n";
        ++shown;
    }
    if (skipped) out << paint("2", "… " + std::to_string(skipped) + " more values (--all lists every one)") << "\n";

    for (const auto& h : r.hints) {
        out << "\n" << paint("33", "hint: ") << h.message;
        if (!h.command.empty()) out << "; to repair:\n      " << h.command;
        out << "\n";
    }
    if (!r.warnings.empty()) out << "\n";
    for (const auto& w : r.warnings)
        out << paint(w.kind == "dangerous_global" ? "31;1" : "31", "warning: ") << w.message << "\n";
}

}  // namespace ckpt
