#include <spdlog/spdlog.h>

#include <iostream>

#include "ckpt/error.hpp"
#include "ckpt/scan.hpp"
#include "command.hpp"

namespace app {

namespace {
struct ScanArgs {
    std::vector<std::string> files;
    FormatArgs format;
    bool strict = false;
};
}  // namespace

Runner setup_scan(CLI::App& sub, const GlobalOptions& global) {
    auto a = std::make_shared<ScanArgs>();
    sub.add_option("FILE", a->files, "Files to scan (checkpoints, pickles, safetensors; never run, never modified)")->required();
    sub.add_flag("--strict", a->strict, "Exit 1 on unknown globals too, not only dangerous ones");
    add_format_options(sub, a->format, "scan.schema.json");
    return [a, &global]() {
        OutputFormat format = a->format.resolve();
        std::vector<ckpt::ScanReport> reports;
        std::vector<ckpt::Annotation> annotations;  // github: in file order, an error where a file failed
        nlohmann::json errors = nlohmann::json::array();
        for (const auto& f : a->files) {
            try {
                reports.push_back(ckpt::scan_file(f));
                if (format == OutputFormat::github)
                    for (auto& x : ckpt::github_annotations(reports.back(), a->strict)) annotations.push_back(std::move(x));
            } catch (const ckpt::Error& e) {
                spdlog::error("{}", e.what());  // this file cannot be scanned: said, and the others go on
                errors.push_back({{"file", f}, {"message", e.what()}});
                annotations.push_back(error_annotation(e, f));
            }
        }
        bool findings = false;
        for (const auto& r : reports) findings |= r.dangerous() > 0 || (a->strict && r.unknown() > 0);
        if (format == OutputFormat::json) {
            nlohmann::json j = ckpt::to_json(reports, a->strict);
            j["errors"] = errors;
            std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
        } else if (format == OutputFormat::github) {
            ckpt::render_github(annotations, "scan", std::cout);
        } else {
            for (const auto& r : reports) ckpt::render_text(r, std::cout, {global.color_enabled()});
        }
        std::cout.flush();
        return !errors.empty() ? 2 : findings ? 1 : 0;
    };
}

}  // namespace app
