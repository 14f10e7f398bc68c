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
    CHECK(r.err == "ckpt-tool: error: unknown command 'inspcet' (did you mean 'inspect'?)\n");
    CHECK(run_tool({}).exit_code == 2);
    CHECK(run_tool({"inspect"}).exit_code == 2);
    auto missing = run_tool({"inspect", "/nonexistent/file.pth"});
    CHECK(missing.exit_code == 2);
    CHECK(missing.err.find("/nonexistent/file.pth: cannot open") != std::string::npos);
    // A bad option of a real command names the option, and suggests no command.
    auto bad = run_tool({"strip-prefix", "x.pth", "--bogus"});
    CHECK(bad.exit_code == 2);
    CHECK(bad.err.find("--bogus") != std::string::npos);
    CHECK(bad.err.find("did you mean") == std::string::npos);
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

TEST_CASE("cli: every parse error is one line of the tool's own, with the command or option meant") {
    // Golden: the whole of stderr, nothing on stdout, exit 2.
    const std::string commands = " (commands: inspect, diff-keys, strip-prefix, verify, convert, merge, scan)\n";
    const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
        {{"inspct", "x.pth"}, "unknown command 'inspct' (did you mean 'inspect'?)\n"},
        {{"-q", "--color", "never", "veify", "x.pth"}, "unknown command 'veify' (did you mean 'verify'?)\n"},
        {{"frobnicate"}, "unknown command 'frobnicate'" + commands},
        {{}, "no command given" + commands},
        {{"-q"}, "no command given" + commands},
        {{"--colour", "never", "inspect", "x.pth"}, "unknown option '--colour' (did you mean '--color'?)\n"},
        {{"--bogus"}, "unknown option '--bogus' (run 'ckpt-tool --help' for the options and commands)\n"},
        {{"verify", "a.pth", "b.pth", "--rtlo", "1e-3"}, "verify: unknown option '--rtlo' (did you mean '--rtol'?)\n"},
        {{"verify", "a.pth", "--rtol=1e-3", "--atl=2"}, "verify: unknown option '--atl' (did you mean '--atol'?)\n"},
        {{"convert", "x.pth", "-o", "y.pth", "--dtyp", "float16"}, "convert: unknown option '--dtyp' (did you mean '--dtype'?)\n"},
        {{"inspect", "x.pth", "--state-dict-ky", "model"},
         "inspect: unknown option '--state-dict-ky' (did you mean '--state-dict-key'?)\n"},
        {{"strip-prefix", "x.pth", "--bogus"},
         "strip-prefix: unknown option '--bogus' (run 'ckpt-tool strip-prefix --help' for its options)\n"},
        {{"inspect", "a.pth", "b.pth"}, "inspect: unexpected argument 'b.pth' (run 'ckpt-tool inspect --help')\n"},
        {{"inspect"}, "inspect: FILE is required (run 'ckpt-tool inspect --help')\n"},
        {{"diff-keys", "only-one.pth"}, "diff-keys: REFERENCE is required (run 'ckpt-tool diff-keys --help')\n"},
        // A global option after the command is read as the global one (the file is what fails here),
        // and a misspelt one is suggested as itself, never as the word typed.
        {{"inspect", "/nonexistent/x.pth", "-q", "--color", "never"}, "/nonexistent/x.pth: cannot open: No such file or directory\n"},
        {{"scan", "x.pth", "--vv"}, "scan: unknown option '--vv' (did you mean '-v'?)\n"},
    };
    for (const auto& [args, message] : cases) {
        std::string line;
        for (const auto& a : args) line += " " + a;
        INFO("ckpt-tool" << line);
        auto r = run_tool(args);
        CHECK(r.exit_code == 2);
        CHECK(r.out.empty());
        CHECK(r.err == "ckpt-tool: error: " + message);
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
