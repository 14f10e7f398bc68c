#include <catch2/catch.hpp>

#include "ckpt/report.hpp"
#include "support/run.hpp"

using testing::run_tool;

TEST_CASE("cli: --version, --help and COMMAND --help with examples") {
    auto v = run_tool({"--version"});
    CHECK(v.exit_code == 0);
    CHECK(v.out.find(ckpt::tool_version()) != std::string::npos);

    auto h = run_tool({"--help"});
    CHECK(h.exit_code == 0);
    CHECK(h.out.find("inspect") != std::string::npos);
    CHECK(h.out.find("Exit codes") != std::string::npos);

    auto ih = run_tool({"inspect", "--help"});
    CHECK(ih.exit_code == 0);
    CHECK(ih.out.find("Examples:") != std::string::npos);
    CHECK(ih.out.find("--state-dict-key") != std::string::npos);
}

TEST_CASE("cli: usage errors exit 2 and suggest the command meant") {
    auto r = run_tool({"inspcet", "x.pth"});
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("Did you mean 'inspect'?") != std::string::npos);
    CHECK(run_tool({}).exit_code == 2);
    CHECK(run_tool({"inspect"}).exit_code == 2);
    auto missing = run_tool({"inspect", "/nonexistent/file.pth"});
    CHECK(missing.exit_code == 2);
    CHECK(missing.err.find("/nonexistent/file.pth: cannot open") != std::string::npos);
    // A bad option of a real command names the option, and suggests no command.
    auto bad = run_tool({"strip-prefix", "x.pth", "--bogus"});
    CHECK(bad.exit_code == 2);
    CHECK(bad.err.find("--bogus") != std::string::npos);
    CHECK(bad.err.find("Did you mean") == std::string::npos);
    CHECK(run_tool({"diff-keys", "only-one.pth"}).exit_code == 2);
    // --json is --format json: with another --format it is a usage error, before any file is read.
    for (const char* cmd : {"diff-keys", "verify", "scan"}) {
        INFO(cmd);
        std::vector<std::string> args = {cmd, "/nonexistent/a.pth"};
        if (std::string(cmd) == "diff-keys") args.push_back("/nonexistent/b.pth");
        args.insert(args.end(), {"--json", "--format", "github"});
        auto both = run_tool(args);
        CHECK(both.exit_code == 2);
        CHECK(both.out.empty());
        CHECK(both.err == "ckpt-tool: error: --json and --format github contradict each other\n");
        args.back() = "yaml";
        CHECK(run_tool(args).exit_code == 2);
    }
}

TEST_CASE("cli: every command has help with examples") {
    for (const char* cmd : {"inspect", "diff-keys", "strip-prefix"}) {
        auto h = run_tool({cmd, "--help"});
        INFO(cmd);
        CHECK(h.exit_code == 0);
        CHECK(h.out.find("Examples:\n  ckpt-tool " + std::string(cmd)) != std::string::npos);
    }
}
