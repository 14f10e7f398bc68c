#include <iostream>

#include <spdlog/spdlog.h>

#include "ckpt/checkpoint.hpp"
#include "ckpt/inspect.hpp"
#include "command.hpp"

namespace app {

namespace {
struct InspectArgs {
    std::string file;
    bool json = false;
    bool all = false;
    std::string state_dict_key;
    std::vector<std::string> keys;
    AllowArgs allow;
};
}  // namespace

Runner setup_inspect(CLI::App& sub, const GlobalOptions& global) {
    auto a = std::make_shared<InspectArgs>();
    sub.add_option("FILE", a->file, "Checkpoint to inspect (.pth, .pt, .ckpt, .bin)")->required();
    sub.add_flag("--json", a->json, "One JSON object on stdout (docs/schema/inspect.schema.json)");
    sub.add_flag("--all", a->all, "Every tensor (optimizer state too), no elided rows");
    sub.add_option("--state-dict-key", a->state_dict_key,
                   "Dotted path of the state dict inside the file (default: detected)");
    sub.add_option("--keys", a->keys, "List only tensors whose key matches this glob (repeatable)");
    add_allow_options(sub, a->allow);
    return [a, &global]() {
        return reporting_errors("inspect", a->json, a->file, [&] {
            auto policy = a->allow.policy();
            ckpt::OpenOptions open;
            if (!a->state_dict_key.empty()) open.state_dict_key = a->state_dict_key;
            auto c = ckpt::Checkpoint::open(a->file, open);
            spdlog::debug("{}: {} records, pickle {} bytes, {} storages, {} tensors", a->file,
                          c->record_count(), c->metadata_size(), c->storages().size(), c->tensors().size());
            ckpt::InspectOptions options;
            options.key_globs = a->keys;
            options.all = a->all;
            options.policy = policy.get();
            ckpt::InspectReport report = ckpt::inspect(*c, options);
            if (a->json) {
                ckpt::write_json(report, std::cout);
            } else {
                ckpt::render_text(report, std::cout, {global.color_enabled()});
            }
            std::cout.flush();
            let_the_os_free(c);
            return 0;
        });
    };
}

}  // namespace app
