#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>

#include "ckpt/atomic_file.hpp"
#include "ckpt/report.hpp"
#include "ckpt/verify.hpp"
#include "command.hpp"

namespace app {

namespace {
struct VerifyArgs {
    std::string file, reference, write_fingerprint, state_dict_key;
    bool force = false;
    ckpt::VerifyOptions options;
    FormatArgs format;
    AllowArgs allow;
};

}  // namespace

Runner setup_verify(CLI::App& sub, const GlobalOptions& global) {
    auto a = std::make_shared<VerifyArgs>();
    sub.add_option("CKPT", a->file, "Checkpoint to verify")->required();
    sub.add_option("REFERENCE", a->reference,
                   "Compare with this: a fingerprint JSON (--write-fingerprint), another checkpoint, or a "
                   "TorchScript model");
    sub.add_option("--write-fingerprint", a->write_fingerprint,
                   "Write CKPT's fingerprint to this JSON file (docs/schema/fingerprint.schema.json); never over "
                   "CKPT, REFERENCE or a file they are read from");
    sub.add_flag("--force", a->force, "Overwrite the --write-fingerprint file if it exists");
    sub.add_option("--rtol", a->options.rtol, "Relative tolerance of every statistic")->capture_default_str();
    sub.add_option("--atol", a->options.atol, "Absolute tolerance of every statistic")->capture_default_str();
    sub.add_flag("--exact", a->options.exact, "Compare content hashes: any changed bit is a finding");
    sub.add_option("--keys", a->options.key_globs, "Only tensors whose key matches this glob (repeatable)");
    sub.add_option("--ignore", a->options.ignore_globs,
                   "Leave out tensors whose key matches this glob, on both sides (repeatable; e.g. '*.num_batches_tracked')");
    sub.add_flag("--all", a->options.all, "Every tensor in the file by key (optimizer state too), not just the state dict");
    sub.add_option("--state-dict-key", a->state_dict_key, "Dotted path of the state dict (default: detected)");
    add_format_options(sub, a->format, "verify.schema.json");
    add_allow_options(sub, a->allow);
    return [a, &global]() {
        OutputFormat format = a->format.resolve();
        a->options.rows = format == OutputFormat::json;  // text and github print findings, no rows
        return reporting_errors("verify", format, a->file, [&] {
            auto policy = a->allow.policy();
            a->options.policy = policy.get();
            ckpt::OpenOptions open;
            if (!a->state_dict_key.empty()) open.state_dict_key = a->state_dict_key;
            if (!a->reference.empty()) {
                a->options.reference = a->reference;
                a->options.reference_open = open;
            }
            a->options.progress = progress_line(global, "verify");
            ckpt::ReferenceAhead reference(a->options);  // a fingerprint file's rows parsed while CKPT opens
            // The fingerprint's target, before any work and again once CKPT's files are known.
            std::vector<std::string> reads{a->file};
            if (!a->reference.empty()) reads.push_back(a->reference);
            if (!a->write_fingerprint.empty()) {
                ckpt::check_output(a->write_fingerprint, reads, a->force);
                std::error_code ec;
                if (!a->reference.empty() && std::filesystem::is_directory(a->reference, ec))
                    for (const auto& e : std::filesystem::recursive_directory_iterator(a->reference, ec))
                        if (e.is_regular_file(ec)) reads.push_back(e.path().string());
            }
            auto c = ckpt::Checkpoint::open(a->file, open);
            if (!a->write_fingerprint.empty()) {
                for (const std::string& f : c->files_read()) reads.push_back(f);
                ckpt::check_output(a->write_fingerprint, reads, a->force);
            }
            ckpt::Fingerprint fp;
            // The fingerprint only when it is written: else its rows move into the report, not copied.
            ckpt::VerifyReport report =
                ckpt::verify(*c, a->options, a->write_fingerprint.empty() ? nullptr : &fp, &reference);
            if (!a->write_fingerprint.empty()) {
                ckpt::AtomicFile out(a->write_fingerprint);
                uint64_t at = 0;
                ckpt::write_json(fp, [&](std::string_view text) {
                    ckpt::write_all(out.fd(), text.data(), text.size(), at, a->write_fingerprint);
                    at += text.size();
                });
                out.commit(true);
            }
            if (format == OutputFormat::json) {
                ckpt::write_json(report, [](std::string_view text) { std::cout.write(text.data(), static_cast<std::streamsize>(text.size())); });
            } else {
                if (format == OutputFormat::github) ckpt::render_github(ckpt::github_annotations(report), "verify", std::cout);
                else ckpt::render_text(report, std::cout, {global.color_enabled()});
                if (!a->write_fingerprint.empty()) std::cout << "fingerprint written to " << ckpt::shown(a->write_fingerprint) << "\n";
            }
            std::cout.flush();
            let_the_os_free(c);
            return report.ok() ? 0 : 1;
        });
    };
}

}  // namespace app
