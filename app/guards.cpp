#include "guards.hpp"

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "ckpt/faults.hpp"

namespace app {

namespace {

void say(const char* text) {
    size_t n = std::strlen(text);
    while (n > 0) {
        ssize_t w = ::write(STDERR_FILENO, text, n);
        if (w <= 0) return;
        text += w;
        n -= static_cast<size_t>(w);
    }
}

// Only async-signal-safe calls: a table lookup, write, unlink, _exit.
void on_sigbus(int, siginfo_t* info, void*) {
    const char* path = ckpt::mapped_file_at(info->si_addr);
    say("ckpt-tool: error: ");
    if (path) {
        say(path);
        say(": ");
    }
    say("the file changed while it was read (cut short by another process?): read it again once it is whole\n");
    ckpt::remove_temporaries_now();
    ::_exit(2);
}

}  // namespace

void guard_signals() {
    ::signal(SIGXFSZ, SIG_IGN);
    struct sigaction bus {};
    bus.sa_sigaction = on_sigbus;
    bus.sa_flags = SA_SIGINFO;
    sigemptyset(&bus.sa_mask);
    ::sigaction(SIGBUS, &bus, nullptr);
}

}  // namespace app
