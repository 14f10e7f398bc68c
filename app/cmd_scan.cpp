#include <spdlog/spdlog.h>

#include <filesystem>
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
    sub.add_option("FILE", a->files,
                   "Files to scan (checkpoints, pickles, .npy/.npz, .pt2, tars, gzip/bz2/xz/lz4/zstd-wrapped pickles, "
                   "safetensors; never run, never modified), folders (every file under them: DeepSpeed, DCP, HF shards …) "
                   "or - for standard input")
        ->required();
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
        std::vector<std::pair<std::string, std::string>> failed, skipped;
        auto add = [&](ckpt::ScanReport r) {
            reports.push_back(std::move(r));
            if (format == OutputFormat::github)
                for (auto& x : ckpt::github_annotations(reports.back())) annotations.push_back(std::move(x));
        };
        auto fail = [&](const std::string& f, const std::string& message, const ckpt::Error* e) {
            spdlog::error("{}", ckpt::shown(message));  // this file cannot be scanned: said, and the others go on
            failed.emplace_back(f, message);
            annotations.push_back(e ? error_annotation(*e, f) : ckpt::Annotation{"error", f, "ckpt-tool error", message});
        };
        for (const auto& f : a->files) {
            try {
                if (f == "-") {
                    add(ckpt::scan_stdin(options));
                } else if (std::filesystem::is_directory(f)) {
                    ckpt::FolderScan fs = ckpt::scan_folder(f, options);
                    for (auto& r : fs.reports) add(std::move(r));
                    for (auto& [file, message] : fs.errors) fail(file, message, nullptr);
                    for (auto& x : fs.skipped) skipped.push_back(std::move(x));
                } else {
                    add(ckpt::scan_file(f, options));
                }
            } catch (const ckpt::Error& e) {
                fail(f, e.what(), &e);
            }
        }
        bool findings = false;
        for (const auto& r : reports) findings |= !r.clean();
        if (format == OutputFormat::json) {
            nlohmann::json j = ckpt::to_json(reports, a->strict);
            nlohmann::json errors = nlohmann::json::array();
            for (const auto& [file, message] : failed) errors.push_back({{"file", file}, {"message", message}});
            j["errors"] = std::move(errors);
            nlohmann::json skips = nlohmann::json::array();
            for (const auto& [file, why] : skipped) skips.push_back({{"file", file}, {"why", why}});
            j["skipped"] = std::move(skips);
            std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
        } else if (format == OutputFormat::sarif) {
            std::cout << ckpt::to_sarif(reports, failed).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
        } else if (format == OutputFormat::github) {
            ckpt::render_github(annotations, "scan", std::cout);
        } else {
            for (const auto& r : reports) ckpt::render_text(r, std::cout, {global.color_enabled()}, global.verbose);
            if (!skipped.empty()) {
                std::cout << skipped.size() << (skipped.size() == 1 ? " file" : " files")
                          << " skipped: no loader reads them as a checkpoint or pickle"
                          << (global.verbose ? ":" : " (-v lists them)") << "\n";
                if (global.verbose)
                    for (const auto& [file, why] : skipped) std::cout << "  " << ckpt::shown(file) << ": " << ckpt::shown(why) << "\n";
            }
        }
        std::cout.flush();
        return !failed.empty() ? 2 : findings ? 1 : 0;
    };
}

}  // namespace app
