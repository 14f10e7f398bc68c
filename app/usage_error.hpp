// A command line CLI11 refused, said in the tool's words: one line, what was wrong, and the command
// or option the user probably meant.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace app {

// Levenshtein distance (insertions, deletions, substitutions).
size_t edit_distance(const std::string& a, const std::string& b);

struct UsageError {
    std::string command;  // the command the line names, "" when it names none of `commands`
    // What follows "ckpt-tool: error: ": "unknown command 'inspct' (did you mean 'inspect'?)",
    // "verify: unknown option '--rtlo' (did you mean '--rtol'?)", "inspect: FILE is required (run
    // 'ckpt-tool inspect --help')" …
    std::string message;
    bool json = false;  // the line asks for JSON (--json, --format json)
};
// `error`, raised parsing `args` (argv without the program's name), in the tool's words.
UsageError usage_error(const CLI::App& cli, const CLI::ParseError& error, const std::vector<std::string>& args,
                       const std::vector<std::string>& commands);

}  // namespace app
