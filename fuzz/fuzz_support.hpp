// What the fuzz targets share: the input as a file for readers that take a path (a memfd, so no disk
// is touched and nothing is left behind), and the caps that keep one input cheap.
//
// The contract every target checks: for any bytes, the library either returns or throws ckpt::Error
// (the clean refusal a user sees as exit 2). Any other exception escapes LLVMFuzzerTestOneInput and
// aborts, which libFuzzer reports as a crash: that, a sanitizer report, a timeout or an OOM is a finding.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ckpt/checkpoint.hpp"
#include "ckpt/error.hpp"
#include "ckpt/fingerprint.hpp"
#include "ckpt/inspect.hpp"

namespace ckpt_fuzz {

// One memfd per process, rewritten for each input; readers open it again by /proc/self/fd/N.
class MemoryFile {
public:
    MemoryFile() {
        m_fd = ::memfd_create("ckpt-fuzz-input", MFD_CLOEXEC);
        if (m_fd < 0) {
            std::perror("memfd_create");
            std::abort();
        }
        m_path = "/proc/self/fd/" + std::to_string(m_fd);
    }
    // The file now holds exactly these bytes.
    const std::string& write(const uint8_t* data, size_t size) {
        if (::ftruncate(m_fd, 0) != 0) std::abort();
        size_t done = 0;
        while (done < size) {
            ssize_t n = ::pwrite(m_fd, data + done, size - done, static_cast<off_t>(done));
            if (n <= 0) std::abort();
            done += static_cast<size_t>(n);
        }
        return m_path;
    }
    const std::string& path() const { return m_path; }

private:
    int m_fd = -1;
    std::string m_path;
};

inline MemoryFile& input_file() {
    static MemoryFile f;
    return f;
}

// What `inspect` and `verify` do with an opened checkpoint: the report and its JSON, and a fingerprint
// of every tensor (CRC-32 checked) when that is cheap — at most 2^20 elements in all, and no problems.
inline void inspect_and_fingerprint(const ckpt::Checkpoint& c) {
    constexpr uint64_t k_max_elements = 1ull << 20;
    try {
        ckpt::InspectReport report = ckpt::inspect(c, {});
        (void)ckpt::to_json(report).dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
    } catch (const ckpt::Error&) {
    }
    uint64_t elements = 0;
    for (const auto& t : c.tensors()) elements += t.numel > k_max_elements ? k_max_elements + 1 : t.numel;
    if (!c.problems().empty() || elements > k_max_elements) return;
    try {
        ckpt::FingerprintOptions o;
        o.all = true;
        o.check_crc = true;
        o.threads = 1;
        (void)ckpt::to_json(ckpt::fingerprint(c, o)).dump(1, ' ', false, nlohmann::json::error_handler_t::replace);
    } catch (const ckpt::Error&) {
    }
}

}  // namespace ckpt_fuzz
