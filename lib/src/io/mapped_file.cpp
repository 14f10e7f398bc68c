#include "io/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ckpt {

namespace {
[[noreturn]] void io_fail(const std::string& path, const std::string& what, int err) {
    throw Error(ErrorKind::io, path, what + ": " + std::strerror(err));
}
}  // namespace

MappedFile::MappedFile(const std::string& path) : m_path(path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) io_fail(path, "cannot open", errno);
    struct stat st;
    if (::fstat(fd, &st) != 0) {
        int err = errno;
        ::close(fd);
        io_fail(path, "cannot stat", err);
    }
    if (S_ISDIR(st.st_mode)) {
        ::close(fd);
        throw Error(ErrorKind::io, path, "is a directory, not a checkpoint file");
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        throw Error(ErrorKind::io, path, "is not a regular file");
    }
    m_size = static_cast<uint64_t>(st.st_size);
    if (m_size > 0) {
        m_data = ::mmap(nullptr, m_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m_data == MAP_FAILED) {
            int err = errno;
            m_data = nullptr;
            ::close(fd);
            io_fail(path, "cannot map", err);
        }
    }
    m_fd = fd;
}

void MappedFile::release(ByteView v) const {
    auto base = reinterpret_cast<uintptr_t>(m_data);
    auto begin = reinterpret_cast<uintptr_t>(v.data), end = begin + v.size;
    if (!m_data || begin < base || end > base + m_size) return;  // not ours (an inflated copy)
    static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    uintptr_t first = (begin + page - 1) & ~(page - 1), last = end & ~(page - 1);  // whole pages only
    if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

void MappedFile::advise_sequential(ByteView v) const {
    auto base = reinterpret_cast<uintptr_t>(m_data);
    auto begin = reinterpret_cast<uintptr_t>(v.data), end = begin + v.size;
    if (!m_data || begin < base || end > base + m_size || v.size == 0) return;
    static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    // A range of a few pages is read in a fault or two: the advice's system call would cost more
    // (one for each of 100,000 small records was a twentieth of verify's time).
    if (v.size < 16 * page) return;
    uintptr_t first = begin & ~(page - 1);
    ::madvise(reinterpret_cast<void*>(first), end - first, MADV_SEQUENTIAL);
}

MappedFile::~MappedFile() {
    if (m_data) ::munmap(m_data, m_size);
    if (m_fd >= 0) ::close(m_fd);
}

}  // namespace ckpt
