#include <iostream>

#include <nlohmann/json.hpp>

#include "command.hpp"

namespace app {

OutputFormat FormatArgs::resolve() const {
    if (json && !format.empty() && format != "json")
        throw ckpt::Error(ckpt::ErrorKind::usage, "", "--json and --format " + format + " contradict each other");
    if (json || format == "json") return OutputFormat::json;
    if (format == "sarif") return OutputFormat::sarif;
    return format == "github" ? OutputFormat::github : OutputFormat::text;
}

void add_format_options(CLI::App& sub, FormatArgs& f, const std::string& schema, bool sarif) {
    std::string help = std::string("Report as text (default), json (as --json)") + (sarif ? ", sarif (SARIF 2.1.0: GitHub code scanning and CI dashboards)" : "") +
                       " or github: one GitHub Actions annotation (::error / ::warning) a finding, at most " +
                       std::to_string(ckpt::k_github_annotation_cap) + ", then a summary line";
    std::vector<std::string> formats{"text", "json", "github"};
    if (sarif) formats.push_back("sarif");
    sub.add_option("--format", f.format, help)->check(CLI::IsMember(formats));
    sub.add_flag("--json", f.json, "One JSON object on stdout (docs/schema/" + schema + "), as --format json");
}

void add_allow_options(CLI::App& sub, AllowArgs& a) {
    sub.add_option("--allow", a.names,
                   "Trust a global that is on no allow-list: module.Name, or module.* for a whole module or "
                   "package (repeatable). Names known to run code stay dangerous.")
        ->type_name("NAME");
    sub.add_option("--allow-file", a.files, "Trust the globals listed in FILE, one NAME a line (# comments)")
        ->type_name("FILE");
}

std::shared_ptr<ckpt::GlobalPolicy> AllowArgs::policy() const {
    auto p = std::make_shared<ckpt::GlobalPolicy>();
    for (const auto& n : names) p->allow(n, "--allow");
    for (const auto& f : files) p->allow_file(f);
    return p;
}

ckpt::Annotation error_annotation(const ckpt::Error& e, const std::string& file) {
    std::string message = e.message();
    if (e.offset()) message += " (at byte " + std::to_string(*e.offset()) + ")";
    return {"error", e.path().empty() ? file : e.path(), "ckpt-tool error", message};
}

namespace {

nlohmann::json error_json(const char* command, const ckpt::Error& e, const std::string& file) {
    nlohmann::json j = ckpt::report_head(command);
    if (!*command) j["command"] = nullptr;  // a command line that names none
    nlohmann::json err;
    err["kind"] = ckpt::error_kind_name(e.kind());
    err["file"] = !e.path().empty() ? nlohmann::json(e.path()) : !file.empty() ? nlohmann::json(file) : nlohmann::json(nullptr);
    err["message"] = e.what();  // the line on stderr, after "ckpt-tool: error: "
    err["offset"] = e.offset() ? nlohmann::json(*e.offset()) : nlohmann::json(nullptr);
    j["error"] = std::move(err);
    return j;
}

}  // namespace

void print_error_json(const char* command, const ckpt::Error& e, const std::string& file) {
    std::cout << error_json(command, e, file).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
}

int reporting_errors(const char* command, OutputFormat format, const std::string& file, const std::function<int()>& body) {
    try {
        return body();
    } catch (const ckpt::Error& e) {
        if (format == OutputFormat::github) std::cout << ckpt::github_command(error_annotation(e, file)) << std::endl;
        if (format == OutputFormat::json) print_error_json(command, e, file);
        throw;
    } catch (const std::exception& e) {  // not the tool's own: a defect, still one JSON object
        if (format == OutputFormat::json) {
            nlohmann::json j = error_json(command, ckpt::Error(ckpt::ErrorKind::usage, "", e.what()), file);
            j["error"]["kind"] = "internal";
            std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
        }
        throw;
    }
}

std::optional<ckpt::DType> cast_dtype(const std::string& name, const std::string& input) {
    if (name.empty()) return std::nullopt;
    auto d = ckpt::dtype_from_name(name);
    if (!d || (*d != ckpt::DType::bfloat16 && *d != ckpt::DType::float16 && *d != ckpt::DType::float32 && *d != ckpt::DType::float64))
        throw ckpt::Error(ckpt::ErrorKind::usage, input, "--dtype " + name + ": expected bfloat16, float16, float32 or float64");
    return d;
}

}  // namespace app
