#include <unistd.h>

#include <cstdio>

#include "ckpt/report.hpp"
#include "command.hpp"

namespace app {

std::function<void(uint64_t, uint64_t)> progress_line(const GlobalOptions& global, const char* label) {
    if (global.quiet || !::isatty(STDERR_FILENO)) return nullptr;
    return [label](uint64_t done, uint64_t total) {
        if (total < (256u << 20)) return;
        std::fprintf(stderr, "\r%s %3d%%  %s of %s\033[K", label, static_cast<int>(100 * done / total),
                     ckpt::human_bytes(done).c_str(), ckpt::human_bytes(total).c_str());
        if (done == total) std::fprintf(stderr, "\r\033[K");
        std::fflush(stderr);
    };
}

}  // namespace app
