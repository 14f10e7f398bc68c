// scan's reports: JSON (docs/schema/scan.schema.json), text, GitHub annotations and SARIF 2.1.0.
#include <algorithm>
#include <map>
#include <ostream>

#include "ckpt/scan.hpp"

namespace ckpt {

namespace {

std::string where(const std::string& record, uint64_t offset, const std::string& opcode) {
    std::string w = opcode.empty() ? "" : opcode + " ";
    w += "at byte " + std::to_string(offset);
    if (!record.empty()) w += " of " + record;
    return w;
}

nlohmann::json null_or(const std::string& s) { return s.empty() ? nlohmann::json() : nlohmann::json(s); }

struct KindText {
    const char* kind;
    const char* title;
    const char* description;
};

// One line a finding kind: SARIF's rules and the text report's headings.
constexpr KindText k_kinds[] = {
    {"global", "global off the allow-lists",
     "The pickle names a global that is on no allow-list: an unpickler imports it and may call it."},
    {"computed_global", "name computed at load time",
     "STACK_GLOBAL takes its module and name from values made while unpickling: what it imports cannot be known first."},
    {"computed_call", "call of a computed value",
     "REDUCE, NEWOBJ or OBJ calls a value made while unpickling rather than a named global."},
    {"extension_code", "extension code",
     "EXT1/2/4 import whatever copyreg's extension registry maps the code to."},
    {"mutates_global", "global changed in place",
     "BUILD, SETITEM or APPEND on a module, class or function itself changes it for the whole process."},
    {"mutates_result", "SETITEM/APPEND into a function's result",
     "Items set into what an allowed function returned call that object's methods (CVE-2026-24747)."},
    {"newobj_function", "NEWOBJ of a function",
     "NEWOBJ of a function, which no pickler writes (CVE-2026-24747)."},
    {"malformed_pickle", "malformed pickle",
     "The pickle breaks half-way: an unpickler runs everything before the fault."},
    {"misplaced_proto", "PROTO past the start", "A second or late PROTO: the stream was edited."},
    {"frame_violation", "FRAME that disagrees with the opcodes",
     "A FRAME ends inside an opcode or opens inside another: unpicklers read different opcodes."},
    {"expansion", "value graph that expands by reference",
     "The object holds vastly more references than values (billion laughs): copying or printing it exhausts memory."},
    {"polyglot", "several formats at once",
     "The file reads as two formats (a pickle and a zip, a tar, a safetensors header …): each loader runs what its own reading finds."},
    {"zip_confusion", "zip that two readers read differently",
     "torch.load's zip reader (miniz) and Python's zipfile (numpy.load, torch.export.load, scanners) hand over different bytes."},
    {"tar_link", "tar member that reaches outside the archive",
     "A member torch.load's tar reading extracts is a link or a device: it unpickles a file outside the archive."},
    {"opaque_wrapper", "content not seen",
     "An archive, an encrypted member or compressed data that is not opened: what it holds is not seen."},
    {"external_file", "array loaded from another file",
     "joblib's NDArrayWrapper loads its array from a file beside the pickle with numpy.load(allow_pickle=True)."},
    {"torchscript_op", "TorchScript code that reaches files, processes or memory",
     "TorchScript code torch.jit.load runs calls an operator that writes files, talks to other processes or reads raw memory."},
    {"hidden_entry", "bytes before the zip's first entry",
     "Bytes before the first local header the directory names: a reader that walks local headers sees another file."},
};

const KindText& kind_text(const std::string& kind) {
    for (const KindText& k : k_kinds)
        if (kind == k.kind) return k;
    return k_kinds[0];
}

std::string rule_id(const ScanFinding& f) {
    std::string id = f.kind == "global" ? std::string(f.severity == GlobalClass::dangerous ? "dangerous" : "unknown") + "-global" : f.kind;
    std::replace(id.begin(), id.end(), '_', '-');
    return id;
}

}  // namespace

nlohmann::json to_json(const std::vector<ScanReport>& reports, bool strict) {
    nlohmann::json j = report_head("scan");
    j["strict"] = strict;
    nlohmann::json files = nlohmann::json::array();
    size_t dangerous = 0, unknown = 0;
    for (const ScanReport& r : reports) {
        nlohmann::json f;
        f["file"] = r.file;
        f["format"] = r.format;
        nlohmann::json pk = nlohmann::json::array();
        for (const auto& p : r.pickles) pk.push_back({{"record", p.record}, {"offset", p.offset}, {"bytes", p.size}, {"protocol", p.protocol}});
        f["pickles"] = std::move(pk);
        nlohmann::json gl = nlohmann::json::array();
        for (const auto& g : r.globals)
            gl.push_back({{"global", g.global}, {"class", global_class_name(g.cls)}, {"rule", g.rule}, {"reason", g.reason},
                          {"weights_only", g.weights_only}, {"record", g.record}, {"offset", g.offset},
                          {"opcode", g.opcode}, {"count", g.count}});
        f["globals"] = std::move(gl);
        nlohmann::json fd = nlohmann::json::array();
        for (const auto& x : r.findings)
            fd.push_back({{"kind", x.kind}, {"severity", global_class_name(x.severity)}, {"global", null_or(x.global)},
                          {"record", x.record}, {"offset", x.offset}, {"opcode", null_or(x.opcode)},
                          {"rule", null_or(x.rule)}, {"message", x.message}});
        f["findings"] = std::move(fd);
        nlohmann::json notes = nlohmann::json::array();
        for (const auto& n : r.notes)
            notes.push_back({{"kind", n.kind}, {"record", n.record}, {"offset", n.offset}, {"message", n.message}});
        f["notes"] = std::move(notes);
        f["weights_only"] = weights_only_json(r.weights_only);
        f["dangerous"] = r.dangerous();
        f["unknown"] = r.unknown();
        dangerous += r.dangerous();
        unknown += r.unknown();
        files.push_back(std::move(f));
    }
    j["files"] = std::move(files);
    j["dangerous"] = dangerous;
    j["unknown"] = unknown;
    return j;
}

void render_text(const ScanReport& r, std::ostream& out, const TextStyle& style, bool verbose) {
    Paint paint{style.color};
    size_t d = r.dangerous(), u = r.unknown();
    out << paint("1", r.file) << " (" << r.format << ", " << r.pickles.size() << " pickle" << (r.pickles.size() == 1 ? "" : "s")
        << ", " << r.globals.size() << " global" << (r.globals.size() == 1 ? "" : "s") << "): ";
    if (r.clean()) out << paint("32", "clean, every global is on an allow-list") << "\n";
    else out << (d ? paint("31", std::to_string(d) + " dangerous") : "0 dangerous") << ", " << u << " unknown\n";
    for (const auto& f : r.findings) {
        bool danger = f.severity == GlobalClass::dangerous;
        out << "  " << (danger ? paint("31", "dangerous") : paint("33", "unknown  ")) << "  "
            << shown(f.global.empty() ? kind_text(f.kind).title : f.global) << "  (" << shown(where(f.record, f.offset, f.opcode)) << ")\n"
            << "             " << shown(f.kind == "global" ? f.message.substr(f.global.size() + 2) : f.message) << "\n";
    }
    if (verbose) {
        for (const auto& g : r.globals)
            if (global_is_known(g.cls))
                out << "  " << paint("32", global_class_name(g.cls)) << "  " << shown(g.global) << "  (" << g.rule << ": " << shown(g.reason) << ")\n";
        for (const auto& n : r.notes) out << "  note  " << shown(n.message) << "  (" << shown(where(n.record, n.offset, "")) << ")\n";
    } else if (!r.notes.empty()) {
        out << "  " << r.notes.size() << " note" << (r.notes.size() == 1 ? "" : "s") << " (-v shows them, --json lists them)\n";
    }
    bool unknown_global = std::any_of(r.findings.begin(), r.findings.end(),
                                      [](const ScanFinding& f) { return f.kind == "global" && f.severity == GlobalClass::unknown; });
    if (u && !d && unknown_global)
        out << "  if these are classes you trust: --allow MODULE.NAME (or MODULE.*), or --allow-file FILE\n";
    if (!r.weights_only.empty() && r.weights_only.front().applies) {
        out << "  ";
        render_weights_only(r.weights_only, out, paint);
    }
}

std::vector<Annotation> github_annotations(const ScanReport& r) {
    std::vector<Annotation> out;
    for (const auto& f : r.findings) {
        std::string kind = f.kind;
        std::replace(kind.begin(), kind.end(), '_', ' ');
        out.push_back({"error", r.file,
                       std::string("scan: ") + (f.severity == GlobalClass::dangerous ? "dangerous " : "unknown ") + kind,
                       f.message + " (" + where(f.record, f.offset, f.opcode) + ")"});
    }
    return out;
}

nlohmann::json to_sarif(const std::vector<ScanReport>& reports, const std::vector<std::pair<std::string, std::string>>& errors) {
    std::map<std::string, nlohmann::json> rules;  // by id, in id order
    nlohmann::json results = nlohmann::json::array(), artifacts = nlohmann::json::array();
    for (const ScanReport& r : reports) {
        artifacts.push_back({{"location", {{"uri", r.file}}}});
        for (const ScanFinding& f : r.findings) {
            std::string id = rule_id(f);
            bool danger = f.severity == GlobalClass::dangerous;
            const KindText& k = kind_text(f.kind);
            if (!rules.count(id))
                rules[id] = {{"id", id},
                             {"name", id},
                             {"shortDescription", {{"text", std::string(danger ? "" : "unknown ") + k.title}}},
                             {"fullDescription", {{"text", k.description}}},
                             {"defaultConfiguration", {{"level", danger ? "error" : "warning"}}},
                             {"help", {{"text", "ckpt-tool scan: docs/cli.md#scan"}}},
                             {"properties", {{"tags", nlohmann::json::array({"security", "pickle"})},
                                             {"security-severity", danger ? "9.8" : "6.5"}}}};
            nlohmann::json location = {
                {"physicalLocation",
                 {{"artifactLocation", {{"uri", r.file}}},
                  // GitHub code scanning needs a line; a checkpoint has none, so line 1 and the byte.
                  {"region", {{"startLine", 1}, {"byteOffset", f.offset}}}}},
                {"logicalLocations",
                 nlohmann::json::array({{{"name", f.record.empty() ? r.file : f.record}, {"kind", "member"}}})}};
            nlohmann::json result = {
                {"ruleId", id},
                {"level", danger ? "error" : "warning"},
                {"message", {{"text", f.message + " (" + where(f.record, f.offset, f.opcode) + ")"}}},
                {"locations", nlohmann::json::array({location})},
                {"partialFingerprints", {{"ckptScanFinding/v1", id + ":" + f.global + ":" + f.record + ":" + std::to_string(f.offset)}}}};
            nlohmann::json props = {{"kind", f.kind}};
            if (!f.global.empty()) props["global"] = f.global;
            if (!f.opcode.empty()) props["opcode"] = f.opcode;
            if (!f.rule.empty()) props["rule"] = f.rule;
            result["properties"] = std::move(props);
            results.push_back(std::move(result));
        }
    }
    nlohmann::json rule_list = nlohmann::json::array();
    for (auto& [id, rule] : rules) rule_list.push_back(std::move(rule));
    nlohmann::json notifications = nlohmann::json::array();
    for (const auto& [file, message] : errors)
        notifications.push_back(
            {{"level", "error"},
             {"message", {{"text", message}}},
             {"locations", nlohmann::json::array({{{"physicalLocation", {{"artifactLocation", {{"uri", file}}}}}}})}});
    nlohmann::json run = {
        {"tool", {{"driver", {{"name", "ckpt-tool"}, {"version", tool_version()}, {"semanticVersion", tool_version()}, {"rules", rule_list}}}}},
        {"artifacts", artifacts},
        {"results", results},
        {"invocations", nlohmann::json::array(
                            {{{"executionSuccessful", errors.empty()}, {"toolExecutionNotifications", notifications}}})},
        {"columnKind", "unicodeCodePoints"}};
    return {{"$schema", "https://json.schemastore.org/sarif-2.1.0.json"},
            {"version", "2.1.0"},
            {"runs", nlohmann::json::array({run})}};
}

}  // namespace ckpt
