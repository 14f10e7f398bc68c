// Running the built binary from a test, as a user would.
#pragma once

#include <string>

namespace testing {

struct RunResult {
    int exit_code = -1;  // -1 when killed by a signal (a crash)
    int signal = 0;
    std::string out;     // stdout
    std::string err;     // stderr
};

// Runs `ckpt-tool ARGS…` (the binary under test) with no shell; captures both streams.
RunResult run_tool(const std::vector<std::string>& args);
std::string tool_path();

}  // namespace testing
