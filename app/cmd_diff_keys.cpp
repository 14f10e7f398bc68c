#include <iostream>

#include "ckpt/diff_keys.hpp"
#include "command.hpp"

namespace app {

namespace {
struct DiffKeysArgs {
    std::string file, reference;
    FormatArgs format;
    bool all = false, strict_dtype = false;
    std::string state_dict_key, reference_state_dict_key;
    std::vector<std::string> ignore;
};
}  // namespace

Runner setup_diff_keys(CLI::App& sub, const GlobalOptions& global) {
    auto a = std::make_shared<DiffKeysArgs>();
    sub.add_option("CKPT", a->file, "Checkpoint (or key manifest) to check")->required();
    sub.add_option("REFERENCE", a->reference,
                   "What it must fit: another checkpoint, a TorchScript model (read through the LibTorch "
                   "backend), or a JSON key manifest (a list of {key, shape, dtype}, inspect --json output, "
                   "a fingerprint)")
        ->required();
    add_format_options(sub, a->format, "diff-keys.schema.json");
    sub.add_flag("--all", a->all, "List every key of every list, no elided rows");
    sub.add_flag("--strict-dtype", a->strict_dtype,
                 "Count dtype differences as a mismatch (exit 1); by default they are reported only, "
                 "since load_state_dict casts");
    sub.add_option("--state-dict-key", a->state_dict_key, "Dotted path of CKPT's state dict (default: detected)");
    sub.add_option("--reference-state-dict-key", a->reference_state_dict_key,
                   "Dotted path of the reference's state dict (default: detected)");
    sub.add_option("--ignore", a->ignore, "Leave out keys matching this glob on both sides (repeatable)");
    return [a, &global]() {
        OutputFormat format = a->format.resolve();
        return reporting_errors("diff-keys", format, a->file, [&] {
            ckpt::OpenOptions open, ref_open;
            if (!a->state_dict_key.empty()) open.state_dict_key = a->state_dict_key;
            if (!a->reference_state_dict_key.empty()) ref_open.state_dict_key = a->reference_state_dict_key;
            ckpt::KeySet file = ckpt::read_key_set(a->file, open);
            ckpt::KeySet reference = ckpt::read_key_set(a->reference, ref_open);
            ckpt::KeyDiff diff = ckpt::diff_keys(file, reference, {a->ignore, a->strict_dtype});
            if (format == OutputFormat::json) {
                std::cout << ckpt::to_json(diff).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
            } else if (format == OutputFormat::github) {
                ckpt::render_github(ckpt::github_annotations(diff), "diff-keys", std::cout);
            } else {
                ckpt::render_text(diff, std::cout, {global.color_enabled()}, {a->all});
            }
            std::cout.flush();
            return diff.match() ? 0 : 1;
        });
    };
}

}  // namespace app
