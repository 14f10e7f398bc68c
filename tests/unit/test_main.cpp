#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "support/builders.hpp"
#include "support/run.hpp"

namespace testing {

std::string scratch_dir(const std::string& name) {
    // One directory per process: ctest runs the cases as parallel processes, and emptying a
    // directory another case is using made them fail now and then.
    std::string base = std::string(CKPT_TEST_SCRATCH) + "/" + name + "." + std::to_string(::getpid());
    std::string cmd = "rm -rf '" + base + "' && mkdir -p '" + base + "'";
    if (std::system(cmd.c_str()) != 0) throw std::runtime_error("cannot make " + base);
    static std::vector<std::string> made;  // removed when the process ends
    if (made.empty()) std::atexit([] {
        for (const auto& d : made) std::system(("rm -rf '" + d + "'").c_str());
    });
    if (std::find(made.begin(), made.end(), base) == made.end()) made.push_back(base);
    return base;
}

std::string tool_path() { return CKPT_TOOL_PATH; }

namespace {
std::string slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}
}  // namespace

RunResult run_tool(const std::vector<std::string>& args) {
    static int counter = 0;
    std::string dir = std::string(CKPT_TEST_SCRATCH) + "/run";
    ::mkdir(CKPT_TEST_SCRATCH, 0755);
    ::mkdir(dir.c_str(), 0755);
    std::string out_path = dir + "/out." + std::to_string(getpid()) + "." + std::to_string(counter);
    std::string err_path = dir + "/err." + std::to_string(getpid()) + "." + std::to_string(counter++);
    pid_t pid = fork();
    if (pid == 0) {
        int o = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int e = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(o, 1);
        dup2(e, 2);
        std::vector<char*> argv;
        std::string tool = tool_path();
        argv.push_back(tool.data());
        std::vector<std::string> copy = args;
        for (auto& a : copy) argv.push_back(a.data());
        argv.push_back(nullptr);
        execv(tool.c_str(), argv.data());
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    RunResult r;
    if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
    r.out = slurp(out_path);
    r.err = slurp(err_path);
    ::unlink(out_path.c_str());
    ::unlink(err_path.c_str());
    return r;
}

}  // namespace testing
