// Running part of a test where no thread can be started: a forked child, dropped to the user nobody
// with RLIMIT_NPROC at 1 (root ignores the limit, so the test must start as root).
#pragma once

#include <functional>
#include <system_error>
#include <thread>

#include <pwd.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

namespace testing {

// Runs `body` in such a child and returns its result (0..255), or -1 when the child could not be
// put there (not root, no user nobody, or the limit did not stop a thread): the caller skips then.
// `body` must not throw; the child ends with _exit, running no destructors of the parent's.
inline int in_child_without_threads(const std::function<int()>& body) {
    if (::geteuid() != 0) return -1;
    pid_t child = ::fork();
    if (child < 0) return -1;
    if (child == 0) {
        const passwd* nobody = ::getpwnam("nobody");
        rlimit one{1, 1};
        if (!nobody || ::setgid(nobody->pw_gid) != 0 || ::setuid(nobody->pw_uid) != 0 ||
            ::setrlimit(RLIMIT_NPROC, &one) != 0)
            ::_exit(255);
        try {
            std::thread([] {}).join();
            ::_exit(255);  // the limit did not hold
        } catch (const std::system_error&) {
        }
        ::_exit(body() & 0xff);
    }
    int status = 0;
    if (::waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) == 255) return -1;
    return WEXITSTATUS(status);
}

}  // namespace testing
