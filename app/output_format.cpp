#include <iostream>

#include "command.hpp"

namespace app {

OutputFormat FormatArgs::resolve() const {
    if (json && !format.empty() && format != "json")
        throw ckpt::Error(ckpt::ErrorKind::usage, "", "--json and --format " + format + " contradict each other");
    if (json || format == "json") return OutputFormat::json;
    return format == "github" ? OutputFormat::github : OutputFormat::text;
}

void add_format_options(CLI::App& sub, FormatArgs& f, const std::string& schema) {
    sub.add_option("--format", f.format,
                   "Report as text (default), json (as --json) or github: one GitHub Actions annotation "
                   "(::error / ::warning) a finding, at most " + std::to_string(ckpt::k_github_annotation_cap) +
                       ", then a summary line")
        ->check(CLI::IsMember({"text", "json", "github"}));
    sub.add_flag("--json", f.json, "One JSON object on stdout (docs/schema/" + schema + "), as --format json");
}

ckpt::Annotation error_annotation(const ckpt::Error& e, const std::string& file) {
    std::string message = e.message();
    if (e.offset()) message += " (at byte " + std::to_string(*e.offset()) + ")";
    return {"error", e.path().empty() ? file : e.path(), "ckpt-tool error", message};
}

int annotating_errors(OutputFormat format, const std::string& file, const std::function<int()>& body) {
    try {
        return body();
    } catch (const ckpt::Error& e) {
        if (format == OutputFormat::github) std::cout << ckpt::github_command(error_annotation(e, file)) << std::endl;
        throw;
    }
}

}  // namespace app
