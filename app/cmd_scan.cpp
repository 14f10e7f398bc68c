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
    AllowArgs allow;
    bool strict = false;
};
}  // namespace

Runner setup_scan(CLI::App& sub, const GlobalOptions& global) {
    auto a = std::make_shared<ScanArgs>();
    sub.add_option("FILE", a->files, "Files to scan (checkpoints, pickles, .npy/.npz, safetensors; never run, never modified)")->required();
    add_allow_options(sub, a->allow);
    sub.add_flag("--strict", a->strict,
                 "Kept for scripts: unknown globals exit 1 by default now (what --strict used to add)");
    add_format_options(sub, a->format, "scan.schema.json", true);
    return [a, &global]() {
        OutputFormat format = a->format.resolve();
        auto policy = a->allow.policy();
        ckpt::ScanOptions options;
        options.policy = policy.get();
        std::vector<ckpt::ScanReport> reports;
        std::vector<ckpt::Annotation> annotations;  // github: in file order, an error where a file failed
        std::vector<std::pair<std::string, std::string>> failed;
        for (const auto& f : a->files) {
            try {
                reports.push_back(ckpt::scan_file(f, options));
                if (format == OutputFormat::github)
                    for (auto& x : ckpt::github_annotations(reports.back())) annotations.push_back(std::move(x));
            } catch (const ckpt::Error& e) {
                spdlog::error("{}", e.what());  // this file cannot be scanned: said, and the others go on
                failed.emplace_back(f, e.what());
                annotations.push_back(error_annotation(e, f));
            }
        }
        bool findings = false;
        for (const auto& r : reports) findings |= !r.clean();
        if (format == OutputFormat::json) {
            nlohmann::json j = ckpt::to_json(reports, a->strict);
            nlohmann::json errors = nlohmann::json::array();
            for (const auto& [file, message] : failed) errors.push_back({{"file", file}, {"message", message}});
            j["errors"] = std::move(errors);
            std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
        } else if (format == OutputFormat::sarif) {
            std::cout << ckpt::to_sarif(reports, failed).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
        } else if (format == OutputFormat::github) {
            ckpt::render_github(annotations, "scan", std::cout);
        } else {
            for (const auto& r : reports) ckpt::render_text(r, std::cout, {global.color_enabled()}, global.verbose);
        }
        std::cout.flush();
        return !failed.empty() ? 2 : findings ? 1 : 0;
    };
}

}  // namespace app
