// A command line CLI11 refused, said in the tool's words: one line, what was wrong, and the command
// or option the user probably meant.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace app {

// Levenshtein distance (insertions, deletions, substitutions).
size_t edit_distance(const std::string& a, const std::string& b);

// The message after "ckpt-tool: error: " for `error`, raised parsing argv: "unknown command
// 'inspct' (did you mean 'inspect'?)", "verify: unknown option '--rtlo' (did you mean '--rtol'?)",
// "inspect: FILE is required (run 'ckpt-tool inspect --help')" …
std::string usage_error_message(const CLI::App& cli, const CLI::ParseError& error, const std::vector<std::string>& args,
                                const std::vector<std::string>& commands);

}  // namespace app
