#include <spdlog/spdlog.h>

#include <iostream>

#include "ckpt/error.hpp"
#include "ckpt/scan.hpp"
#include "command.hpp"

namespace app {

namespace {
struct ScanArgs {
    std::vector<std::string> files;
    bool json = false, strict = false;
};
}  // namespace

Runner setup_scan(CLI::App& sub, const GlobalOptions& global) {
    auto a = std::make_shared<ScanArgs>();
    sub.add_option("FILE", a->files, "Files to scan (checkpoints, pickles, safetensors; never run, never modified)")->required();
    sub.add_flag("--strict", a->strict, "Exit 1 on unknown globals too, not only dangerous ones");
    sub.add_flag("--json", a->json, "One JSON object on stdout (docs/schema/scan.schema.json)");
    return [a, &global]() {
        std::vector<ckpt::ScanReport> reports;
        nlohmann::json errors = nlohmann::json::array();
        for (const auto& f : a->files) {
            try {
                reports.push_back(ckpt::scan_file(f));
            } catch (const ckpt::Error& e) {
                spdlog::error("{}", e.what());  // this file cannot be scanned: said, and the others go on
                errors.push_back({{"file", f}, {"message", e.what()}});
            }
        }
        bool findings = false;
        for (const auto& r : reports) findings |= r.dangerous() > 0 || (a->strict && r.unknown() > 0);
        if (a->json) {
            nlohmann::json j = ckpt::to_json(reports, a->strict);
            j["errors"] = errors;
            std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
        } else {
            for (const auto& r : reports) ckpt::render_text(r, std::cout, {global.color_enabled()});
        }
        std::cout.flush();
        return !errors.empty() ? 2 : findings ? 1 : 0;
    };
}

}  // namespace app
