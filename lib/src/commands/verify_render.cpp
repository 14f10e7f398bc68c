// verify's report as JSON (streamed a row at a time), text and GitHub annotations.
#include <ostream>
#include <string>
#include <unordered_map>

#include "ckpt/report.hpp"
#include "ckpt/verify.hpp"

namespace ckpt {

namespace {

nlohmann::json verdict_json(const VerifyReport& r, const TensorVerdict& v) {
    nlohmann::json t = print_json(v.print);
    if (r.reference) {
        t["status"] = v.status;
        t["reference"] = v.reference ? stats_json(*v.reference) : nlohmann::json(nullptr);
        if (v.status == "drift") {
            t["worst_stat"] = v.worst_stat;
            t["relative_change"] = std::isinf(v.relative_change) ? nlohmann::json("inf") : nlohmann::json(v.relative_change);
        }
    }
    return t;
}

nlohmann::json finding_json(const Finding& f) {
    nlohmann::json x = {{"kind", f.kind}, {"key", f.key}, {"message", f.message}};
    if (f.kind == "drift") x["relative_change"] = std::isinf(f.relative_change) ? nlohmann::json("inf") : nlohmann::json(f.relative_change);
    return x;
}

// The report without its rows: "findings" and "tensors" are empty arrays.
nlohmann::json verify_head(const VerifyReport& r) {
    nlohmann::json j = report_head("verify");
    j["file"] = r.file;
    j["reference"] = r.reference ? nlohmann::json(*r.reference) : nlohmann::json(nullptr);
    j["ok"] = r.ok();
    j["options"] = {{"rtol", r.options.rtol}, {"atol", r.options.atol}, {"exact", r.options.exact},
                    {"scope", r.options.all ? "all" : "state_dict"}};
    j["records_checked"] = r.records_checked;
    j["records_without_crc"] = r.records_without_crc;
    j["bytes_read"] = r.bytes_read;
    j["notes"] = r.notes;
    j["findings"] = nlohmann::json::array();
    j["tensors"] = nlohmann::json::array();
    return j;
}

}  // namespace

nlohmann::json to_json(const VerifyReport& r) {
    nlohmann::json j = verify_head(r);
    for (const auto& f : r.findings) j["findings"].push_back(finding_json(f));
    for (const auto& v : r.tensors) j["tensors"].push_back(verdict_json(r, v));
    return j;
}

void write_json(const VerifyReport& r, const std::function<void(std::string_view)>& sink) {
    write_json_streamed(verify_head(r), 2,
                        {{"findings", [&](const JsonRowSink& row) { for (const auto& f : r.findings) row(finding_json(f)); }},
                         {"tensors", [&](const JsonRowSink& row) { for (const auto& v : r.tensors) row(verdict_json(r, v)); }}},
                        sink);
}

void render_text(const VerifyReport& r, std::ostream& out, const TextStyle& style) {
    Paint paint{style.color};
    size_t compared = r.tensors_read;
    out << paint("1", r.file);
    if (r.reference) out << " vs " << paint("1", *r.reference);
    out << ": ";
    if (r.ok()) out << paint("32", "ok");
    else out << paint("31", std::to_string(r.findings.size()) + (r.findings.size() == 1 ? " finding" : " findings"));
    bool unread = std::any_of(r.findings.begin(), r.findings.end(), [](const Finding& f) { return f.kind == "record_frame"; }) &&
                  !r.tensors_read;
    if (unread) {
        out << " — no value read: records cannot be found";
    } else {
        out << " — " << compared << " tensors, ";
        if (r.records_checked) out << r.records_checked << " records (CRC-32), ";
        else out << "no CRC-32 in this format, ";
        if (r.records_without_crc) out << r.records_without_crc << " without one, ";
        out << human_bytes(r.bytes_read) << " read";
    }
    if (r.reference)
        out << "; " << (r.options.exact ? std::string("exact content") : "rtol " + repr_float(r.options.rtol) + ", atol " + repr_float(r.options.atol));
    out << "\n";
    std::unordered_map<std::string, size_t> by_kind;
    for (const auto& f : r.findings) {
        if (++by_kind[f.kind] > 20) continue;
        const char* color = f.kind == "drift" || f.kind == "nan" || f.kind == "inf" ? "33" : "31";
        out << "  " << paint(color, f.kind) << "  " << shown(f.message) << "\n";
    }
    for (const auto& [kind, n] : by_kind)
        if (n > 20) out << "  … " << n - 20 << " more " << kind << " findings (--json lists all)\n";
    for (const auto& n : r.notes) out << "note: " << shown(n) << "\n";
    if (by_kind.count("missing") && by_kind.count("extra"))
        out << "note: the key sets differ; `ckpt-tool diff-keys " << shown(shell_quote(r.file)) << " "
            << shown(shell_quote(*r.reference)) << "` finds the prefix change that fixes them\n";
}

namespace {
// "verify: NaN", "verify: CRC mismatch" …: the finding's kind in words (index_* and other kinds of
// Checkpoint::problems() with their underscores as spaces).
std::string finding_title(const std::string& kind) {
    static const std::unordered_map<std::string, const char*> words = {
        {"crc_mismatch", "CRC mismatch"}, {"mixed_saves", "parts of two saves"}, {"record_frame", "broken record"}, {"nan", "NaN"}, {"inf", "Inf"}, {"missing", "missing tensor"},
        {"extra", "extra tensor"}, {"changed", "changed tensor"}};
    auto it = words.find(kind);
    std::string title = it != words.end() ? it->second : kind;
    std::replace(title.begin(), title.end(), '_', ' ');
    return "verify: " + title;
}
}  // namespace

std::vector<Annotation> github_annotations(const VerifyReport& r) {
    std::vector<Annotation> out;
    for (const auto& f : r.findings) out.push_back({"error", r.file, finding_title(f.kind), f.message});
    return out;
}

}  // namespace ckpt
