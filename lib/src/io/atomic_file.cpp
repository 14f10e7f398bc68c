#include "ckpt/atomic_file.hpp"
#include "ckpt/faults.hpp"

#include "base/text_util.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>
#include <system_error>
#include <vector>

#include "ckpt/error.hpp"

namespace ckpt {

namespace {

[[noreturn]] void io_fail(const std::string& path, const std::string& what, int err) {
    throw Error(ErrorKind::io, path, what + ": " + std::strerror(err));
}

using text::base_name;
using text::parent_dir;

// Temporaries to remove if a signal ends the process. A signal handler may only touch memory it can
// read without locks, so this is a fixed table of paths with an atomic "in use" flag each — the one
// piece of global state in the library, and it holds nothing but cleanup duties.
constexpr int k_slots = 8;
struct Slot {
    std::atomic<bool> used{false};
    char path[4096];
};
Slot g_slots[k_slots];
std::atomic<bool> g_handlers_installed{false};

void on_signal(int sig) {
    for (Slot& s : g_slots)
        if (s.used.load()) ::unlink(s.path);
    ::signal(sig, SIG_DFL);
    ::raise(sig);
}

int register_temp(const std::string& path) {
    if (path.size() >= sizeof(Slot::path)) return -1;
    if (!g_handlers_installed.exchange(true)) {
        for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
            struct sigaction old {};
            ::sigaction(sig, nullptr, &old);
            if (old.sa_handler == SIG_DFL) ::signal(sig, on_signal);  // leave a caller's handler alone
        }
    }
    for (int i = 0; i < k_slots; ++i) {
        if (g_slots[i].used.load()) continue;
        std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
        g_slots[i].used.store(true);
        return i;
    }
    return -1;
}

void unregister_temp(int slot) {
    if (slot >= 0) g_slots[slot].used.store(false);
}

std::function<void(const std::string&)> g_stale_notice;

// Temporaries of `target` that a writer killed outright (SIGKILL, a power cut: no handler runs) left
// behind: ".NAME.PID.XXXXXXXX.tmp" whose PID is no longer a process. Removed after a commit.
void remove_stale_temporaries(const std::string& target) {
    std::string dir = parent_dir(target), lead = "." + base_name(target) + ".";
    DIR* d = ::opendir(dir.c_str());
    if (!d) return;
    while (dirent* e = ::readdir(d)) {
        std::string name = e->d_name;
        if (name.size() <= lead.size() + 13 || name.compare(0, lead.size(), lead) != 0 || name.compare(name.size() - 4, 4, ".tmp") != 0)
            continue;
        std::string rest = name.substr(lead.size(), name.size() - lead.size() - 4);  // PID.XXXXXXXX
        size_t dot = rest.find('.');
        if (dot == std::string::npos || dot == 0 || rest.size() - dot - 1 != 8) continue;
        if (rest.find_first_not_of("0123456789") != dot) continue;
        if (rest.find_first_not_of("0123456789abcdef", dot + 1) != std::string::npos) continue;
        long pid = std::strtol(rest.substr(0, dot).c_str(), nullptr, 10);
        if (pid <= 0 || pid == static_cast<long>(::getpid())) continue;
        if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to judge)
        if (::unlinkat(::dirfd(d), name.c_str(), 0) == 0 && g_stale_notice) g_stale_notice(dir + "/" + name);
    }
    ::closedir(d);
}

}  // namespace

AtomicFile::AtomicFile(std::string target) : m_target(std::move(target)) {
    std::string dir = parent_dir(m_target);
    std::random_device rd;
    for (int attempt = 0; attempt < 16 && m_fd < 0; ++attempt) {
        char suffix[48];
        std::snprintf(suffix, sizeof suffix, ".%ld.%08x.tmp", static_cast<long>(::getpid()), static_cast<unsigned>(rd()));
        m_temp = dir + "/." + base_name(m_target) + suffix;
        m_fd = ::open(m_temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (m_fd < 0 && errno != EEXIST) io_fail(m_target, "cannot create a file in " + dir, errno);
    }
    if (m_fd < 0) io_fail(m_target, "cannot create a temporary file in " + dir, EEXIST);
    m_slot = register_temp(m_temp);
    remove_stale_temporaries(m_target);  // a killed run's, before this run's output takes room beside them
}

void on_stale_temporary(std::function<void(const std::string& path)> notice) { g_stale_notice = std::move(notice); }

AtomicFile::~AtomicFile() { discard(); }

void AtomicFile::discard() {
    if (m_syncer.joinable()) m_syncer.join();
    if (m_fd >= 0) {
        ::close(m_fd);
        m_fd = -1;
    }
    if (!m_committed && !m_temp.empty()) {
        ::unlink(m_temp.c_str());
        m_temp.clear();
    }
    unregister_temp(m_slot);
    m_slot = -1;
}

void AtomicFile::start_sync() {
    if (m_fd < 0) throw Error(ErrorKind::io, m_target, "output was discarded before commit");
    if (m_synced || m_syncer.joinable()) return;
    try {
        m_syncer = std::thread([this, fd = m_fd] { m_sync_errno = ::fsync(fd) == 0 ? 0 : errno; });
    } catch (const std::system_error&) {
        // No thread: sync() does the fsync in this one.
    }
}

void AtomicFile::sync() {
    if (m_fd < 0) throw Error(ErrorKind::io, m_target, "output was discarded before commit");
    if (m_synced) return;
    int err = 0;
    if (m_syncer.joinable()) {
        m_syncer.join();
        err = m_sync_errno;
    } else if (::fsync(m_fd) != 0) {
        err = errno;
    }
    if (err) io_fail(m_target, "cannot flush to disk", err);
    m_synced = true;
}

void commit_set(const std::vector<std::unique_ptr<AtomicFile>>& files, AtomicFile* index, bool replace) {
    for (const auto& f : files) f->sync();
    if (index) index->sync();
    if (index && replace && ::unlink(index->target().c_str()) != 0 && errno != ENOENT)
        io_fail(index->target(), "cannot remove the old index", errno);
    for (const auto& f : files) f->commit(replace);
    if (index) index->commit(replace);
}

void AtomicFile::commit(bool replace) {
    sync();
    // Keep the mode an existing target had (an in-place repair should not change permissions).
    struct stat st {};
    if (replace && ::stat(m_target.c_str(), &st) == 0) ::fchmod(m_fd, st.st_mode & 07777);
    if (::close(m_fd) != 0) {
        m_fd = -1;
        io_fail(m_target, "cannot close", errno);
    }
    m_fd = -1;
    if (replace) {
        if (::rename(m_temp.c_str(), m_target.c_str()) != 0) io_fail(m_target, "cannot rename into place", errno);
    } else if (::renameat2(AT_FDCWD, m_temp.c_str(), AT_FDCWD, m_target.c_str(), RENAME_NOREPLACE) != 0) {
        int err = errno;
        if (err == EEXIST) throw Error(ErrorKind::io, m_target, "exists (use --force to overwrite)");
        if (err != EINVAL && err != ENOSYS) io_fail(m_target, "cannot rename into place", err);
        // A filesystem without RENAME_NOREPLACE: link() fails on an existing target just the same.
        if (::link(m_temp.c_str(), m_target.c_str()) != 0) {
            err = errno;
            if (err == EEXIST) throw Error(ErrorKind::io, m_target, "exists (use --force to overwrite)");
            io_fail(m_target, "cannot move into place", err);
        }
        ::unlink(m_temp.c_str());
    }
    m_committed = true;
    unregister_temp(m_slot);
    m_slot = -1;
    remove_stale_temporaries(m_target);
    int dfd = ::open(parent_dir(m_target).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        ::fsync(dfd);  // the rename itself reaches the disk
        ::close(dfd);
    }
}

void WritebackHint::written_up_to(uint64_t end) {
    constexpr uint64_t k_stretch = 32ull << 20;
    if (end < m_started + k_stretch) return;
    ::sync_file_range(m_fd, static_cast<off64_t>(m_started), static_cast<off64_t>(end - m_started),
                      SYNC_FILE_RANGE_WRITE);  // a hint: errors surface at fsync
    m_started = end;
}

void write_all(int fd, const void* data, size_t size, uint64_t offset, const std::string& path) {
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
        ssize_t n = ::pwrite(fd, p, size, static_cast<off_t>(offset));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) io_fail(path, "write failed", n < 0 ? errno : EIO);
        p += n;
        size -= static_cast<size_t>(n);
        offset += static_cast<uint64_t>(n);
    }
}

namespace {

// The bytes of [offset, offset + size) that are data, as (begin, end) ranges; a filesystem without
// SEEK_DATA answers with the whole range.
std::vector<std::pair<uint64_t, uint64_t>> data_ranges(int fd, uint64_t offset, uint64_t size) {
    std::vector<std::pair<uint64_t, uint64_t>> out;
    uint64_t end = offset + size;
    for (uint64_t at = offset; at < end;) {
        off_t data = ::lseek(fd, static_cast<off_t>(at), SEEK_DATA);
        if (data < 0) {
            if (errno == ENXIO) break;  // only a hole from here to the end of the file
            return {{offset, end}};     // not supported here: copy everything
        }
        if (static_cast<uint64_t>(data) >= end) break;
        off_t hole = ::lseek(fd, data, SEEK_HOLE);
        if (hole < 0) return {{offset, end}};
        uint64_t stop = std::min<uint64_t>(static_cast<uint64_t>(hole), end);
        out.emplace_back(static_cast<uint64_t>(data), stop);
        at = stop;
    }
    return out;
}

void copy_data(int in_fd, uint64_t in_offset, int out_fd, uint64_t out_offset, uint64_t size,
               const std::string& path);

}  // namespace

void copy_range(int in_fd, uint64_t in_offset, int out_fd, uint64_t out_offset, uint64_t size,
                const std::string& path) {
    if (size == 0) return;
    struct stat st {};
    if (::fstat(in_fd, &st) != 0) io_fail(path, "cannot stat the input while copying", errno);
    // A file with fewer blocks than bytes has holes; most checkpoints have none, and skip the search.
    bool sparse = static_cast<uint64_t>(st.st_blocks) * 512 < static_cast<uint64_t>(st.st_size);
    if (!sparse) return copy_data(in_fd, in_offset, out_fd, out_offset, size, path);
    if (in_offset + size > static_cast<uint64_t>(st.st_size))
        throw Error(ErrorKind::io, path, "input ended early while copying (truncated?)");
    for (auto [begin, end] : data_ranges(in_fd, in_offset, size))
        copy_data(in_fd, begin, out_fd, out_offset + (begin - in_offset), end - begin, path);
    // A hole at the end of the range: the output must still reach its end.
    struct stat ost {};
    if (::fstat(out_fd, &ost) != 0) io_fail(path, "cannot stat the output", errno);
    if (static_cast<uint64_t>(ost.st_size) < out_offset + size &&
        ::ftruncate(out_fd, static_cast<off_t>(out_offset + size)) != 0)
        io_fail(path, "cannot extend the output", errno);
}

namespace {

void copy_data(int in_fd, uint64_t in_offset, int out_fd, uint64_t out_offset, uint64_t size,
               const std::string& path) {
    bool kernel = true;
    while (size > 0 && kernel) {
        loff_t in = static_cast<loff_t>(in_offset), out = static_cast<loff_t>(out_offset);
        size_t chunk = static_cast<size_t>(std::min<uint64_t>(size, 1ull << 30));
        ssize_t n = ::copy_file_range(in_fd, &in, out_fd, &out, chunk, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP ||
                      errno == EPERM)) {
            kernel = false;  // not between these files: copy through a buffer instead
            break;
        }
        if (n < 0) io_fail(path, "copy failed", errno);
        if (n == 0) throw Error(ErrorKind::io, path, "input ended early while copying (truncated?)");
        in_offset += static_cast<uint64_t>(n);
        out_offset += static_cast<uint64_t>(n);
        size -= static_cast<uint64_t>(n);
    }
    if (size == 0) return;
    std::vector<char> buf(static_cast<size_t>(std::min<uint64_t>(size, 4u << 20)));
    while (size > 0) {
        size_t want = static_cast<size_t>(std::min<uint64_t>(size, buf.size()));
        ssize_t n = ::pread(in_fd, buf.data(), want, static_cast<off_t>(in_offset));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) io_fail(path, "read failed while copying", errno);
        if (n == 0) throw Error(ErrorKind::io, path, "input ended early while copying (truncated?)");
        write_all(out_fd, buf.data(), static_cast<size_t>(n), out_offset, path);
        in_offset += static_cast<uint64_t>(n);
        out_offset += static_cast<uint64_t>(n);
        size -= static_cast<uint64_t>(n);
    }
}

}  // namespace

void remove_temporaries_now() {
    for (Slot& s : g_slots)
        if (s.used.load()) ::unlink(s.path);
}

void check_output(const std::string& target, const std::vector<std::string>& reads, bool force) {
    struct stat t {};
    if (::stat(target.c_str(), &t) != 0) return;  // nothing there (what else is wrong, the writer's open says)
    if (!S_ISREG(t.st_mode)) {
        const char* what = S_ISDIR(t.st_mode) ? "a folder" : S_ISFIFO(t.st_mode) ? "a FIFO" : S_ISCHR(t.st_mode) || S_ISBLK(t.st_mode) ? "a device" : "no regular file";
        throw Error(ErrorKind::usage, target, std::string("is ") + what + ": an output replaces only a regular file");
    }
    for (const std::string& r : reads) {
        struct stat in {};
        if (::stat(r.c_str(), &in) == 0 && in.st_dev == t.st_dev && in.st_ino == t.st_ino)
            throw Error(ErrorKind::usage, target,
                        r == target ? "is read by this run (the input, or a file of it): an output is never written over what it reads"
                                    : "is " + r + ", which this run reads: an output is never written over what it reads");
    }
    if (!force) throw Error(ErrorKind::usage, target, "exists (use --force to overwrite)");
}

}  // namespace ckpt
