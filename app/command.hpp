// What every subcommand file gives the command table, and what main gives every subcommand.
#pragma once

#include <functional>
#include <iostream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "ckpt/dtype.hpp"
#include "ckpt/error.hpp"
#include "ckpt/globals.hpp"
#include "ckpt/report.hpp"

namespace app {

struct GlobalOptions {
    bool verbose = false;
    bool quiet = false;
    std::string color = "auto";  // auto | always | never
    bool color_enabled() const;  // for stdout
};

// A subcommand binds its options to `sub` and returns the function that runs it (its exit code).
using Runner = std::function<int()>;
using Setup = Runner (*)(CLI::App& sub, const GlobalOptions& global);

struct Command {
    const char* name;
    const char* summary;
    const char* examples;
    Setup setup;
};

Runner setup_inspect(CLI::App& sub, const GlobalOptions& global);
Runner setup_diff_keys(CLI::App& sub, const GlobalOptions& global);
Runner setup_strip_prefix(CLI::App& sub, const GlobalOptions& global);
Runner setup_verify(CLI::App& sub, const GlobalOptions& global);
Runner setup_convert(CLI::App& sub, const GlobalOptions& global);
Runner setup_scan(CLI::App& sub, const GlobalOptions& global);
Runner setup_merge(CLI::App& sub, const GlobalOptions& global);

// How a command that judges (diff-keys, verify, scan) reports: `--format text|json|github` (scan:
// also sarif), and `--json`, which is `--format json` (kept as it was).
enum class OutputFormat { text, json, github, sarif };
struct FormatArgs {
    bool json = false;
    std::string format;  // "" when --format was not given
    // Error(usage) when --json meets --format text or github.
    OutputFormat resolve() const;
};
void add_format_options(CLI::App& sub, FormatArgs& f, const std::string& schema, bool sarif = false);

// `--allow NAME` (repeatable) and `--allow-file FILE`: globals the user trusts, for every command
// that judges globals (scan, verify, inspect), through the one GlobalPolicy.
struct AllowArgs {
    std::vector<std::string> names;
    std::vector<std::string> files;
    // Error(usage) for a rule that is no dotted name; Error(io) naming an allow file it cannot read.
    std::shared_ptr<ckpt::GlobalPolicy> policy() const;
};
void add_allow_options(CLI::App& sub, AllowArgs& a);

// `--format github`: the ::error annotation of an error (the path it names, else `file`; title
// "ckpt-tool error"), written to stdout besides the one line on stderr that main writes.
ckpt::Annotation error_annotation(const ckpt::Error& e, const std::string& file);
// `--json`: the report of an error, one JSON object on stdout (docs/schema/error.schema.json): the
// report head of `command` ("": null, a command line that names none) and error {kind, file (the
// path it names, else `file`, else null), message (the line on stderr), offset}.
void print_error_json(const char* command, const ckpt::Error& e, const std::string& file);
// Runs `body`; an Error it throws is also an annotation on stdout in github format, the error's
// JSON report in json format, then goes on to main (the line on stderr, exit 2).
int reporting_errors(const char* command, OutputFormat format, const std::string& file, const std::function<int()>& body);
inline int reporting_errors(const char* command, bool json, const std::string& file, const std::function<int()>& body) {
    return reporting_errors(command, json ? OutputFormat::json : OutputFormat::text, file, body);
}

// `--dtype NAME` of a writer (convert, merge): the floating-point type to cast to; nullopt for "";
// Error(usage) naming `input` for anything but bfloat16, float16, float32, float64.
std::optional<ckpt::DType> cast_dtype(const std::string& name, const std::string& input);

// A writer's report on stdout: its JSON (--json) or its text.
template <class Report>
void print_report(const Report& report, bool json, const GlobalOptions& global) {
    if (json) std::cout << to_json(report).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    else render_text(report, std::cout, {global.color_enabled(), global.verbose});
    std::cout.flush();
}

// The process ends right after a command: the OS takes memory back at once, while freeing a value
// tree of millions of nodes one by one costs more than reading it (measured: ~12% of inspect). Under
// AddressSanitizer it is freed, so that leak checking reports real leaks only.
template <class T>
void let_the_os_free(std::unique_ptr<T>& p) {
#if defined(__SANITIZE_ADDRESS__)
    p.reset();
#else
    (void)p.release();
#endif
}

// "verify  45%  460.0 MiB of 1.0 GiB" on one line of a terminal's stderr, for work over 256 MiB;
// nothing when stderr is not a terminal or with -q.
std::function<void(uint64_t, uint64_t)> progress_line(const GlobalOptions& global, const char* label);

}  // namespace app
