#include "io/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace ckpt {

namespace {

// The mappings a SIGBUS handler may look up: a fixed table of atomics and bytes, no lock.
constexpr int k_map_slots = 64;
struct MapSlot {
    std::atomic<const uint8_t*> base{nullptr};
    std::atomic<uint64_t> size{0};
    char path[1024];
};
MapSlot g_maps[k_map_slots];
std::atomic<unsigned> g_next_map{0};

void note_mapping(const void* base, uint64_t size, const std::string& path) {
    MapSlot& s = g_maps[g_next_map.fetch_add(1) % k_map_slots];
    s.base.store(nullptr);
    size_t n = std::min(path.size(), sizeof(s.path) - 1);
    std::memcpy(s.path, path.data(), n);
    s.path[n] = '\0';
    s.size.store(size);
    s.base.store(static_cast<const uint8_t*>(base));
}

void forget_mapping(const void* base) {
    for (MapSlot& s : g_maps)
        if (s.base.load() == base) s.base.store(nullptr);
}

[[noreturn]] void io_fail(const std::string& path, const std::string& what, int err) {
    throw Error(ErrorKind::io, path, what + ": " + std::strerror(err));
}
}  // namespace

MappedFile::MappedFile(const std::string& path) : m_path(path) {
    // Non-blocking: a FIFO's open returns at once (to be refused below) instead of waiting for a writer.
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
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
        throw Error(ErrorKind::io, path, S_ISFIFO(st.st_mode) ? "is a FIFO, not a file: give the file itself, or pipe it to `-` where a command reads standard input"
                                                              : "is not a regular file");
    }
    map(fd);
}

void MappedFile::map(int fd) {
    struct stat st;
    if (::fstat(fd, &st) != 0) {
        int err = errno;
        ::close(fd);
        io_fail(m_path, "cannot stat", err);
    }
    m_size = static_cast<uint64_t>(st.st_size);
    if (m_size > 0) {
        m_data = ::mmap(nullptr, m_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m_data == MAP_FAILED) {
            int err = errno;
            m_data = nullptr;
            ::close(fd);
            io_fail(m_path, "cannot map", err);
        }
    }
    m_fd = fd;
    if (m_data) note_mapping(m_data, m_size, m_path);
}

const char* mapped_file_at(const void* addr) {
    auto a = static_cast<const uint8_t*>(addr);
    for (const MapSlot& s : g_maps) {
        const uint8_t* b = s.base.load();
        if (b && a >= b && a < b + s.size.load()) return s.path;
    }
    return nullptr;
}

std::unique_ptr<MappedFile> MappedFile::spool(int in, const std::string& name) {
    const char* dir = std::getenv("TMPDIR");
    std::string where = dir && *dir ? dir : "/tmp";
    int fd = ::open(where.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) io_fail(name, "cannot make a temporary file in " + where + " to hold it", errno);
    std::vector<char> buf(1u << 20);
    while (true) {
        ssize_t n = ::read(in, buf.data(), buf.size());
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            int err = errno;
            ::close(fd);
            io_fail(name, "cannot read", err);
        }
        if (n == 0) break;
        for (ssize_t done = 0; done < n;) {
            ssize_t w = ::write(fd, buf.data() + done, static_cast<size_t>(n - done));
            if (w < 0 && errno == EINTR) continue;
            if (w < 0) {
                int err = errno;
                ::close(fd);
                io_fail(name, "cannot spool it to " + where, err);
            }
            done += w;
        }
    }
    std::unique_ptr<MappedFile> f(new MappedFile());
    f->m_path = name;
    f->map(fd);
    return f;
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
    if (m_data) forget_mapping(m_data);
    if (m_data) ::munmap(m_data, m_size);
    if (m_fd >= 0) ::close(m_fd);
}

std::string read_text_file(const std::string& path, uint64_t max_bytes, const std::string& what) {
    MappedFile f(path);
    if (f.size() > max_bytes)
        throw Error(ErrorKind::limit, path, what + " of " + std::to_string(f.size()) + " bytes, over the " + std::to_string(max_bytes) + " read");
    return std::string(reinterpret_cast<const char*>(f.view().data), f.size());
}

}  // namespace ckpt
