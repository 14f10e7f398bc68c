// A read-only memory mapping of a whole file. Tensor bytes are touched only where a command reads them;
// `inspect` touches the zip directory and data.pkl, nothing else.
#pragma once

#include <memory>
#include <string>

#include "ckpt/bytes.hpp"
#include "ckpt/faults.hpp"

namespace ckpt {

class MappedFile {
public:
    // Throws Error(io) when the file cannot be opened or mapped, naming the path.
    explicit MappedFile(const std::string& path);
    // A pipe or any other stream (standard input: `-`), copied to a temporary file of $TMPDIR (or
    // /tmp) that no name points to, then mapped: readers see a file like any other. `name` stands
    // for it in errors. Throws Error(io) naming `name` when it cannot be read or spooled.
    static std::unique_ptr<MappedFile> spool(int fd, const std::string& name);
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const std::string& path() const { return m_path; }
    ByteView view() const { return {static_cast<const uint8_t*>(m_data), m_size}; }
    uint64_t size() const { return m_size; }
    // The open file, for copies the kernel does (copy_file_range) without touching the mapping.
    int fd() const { return m_fd; }
    // Drops the pages of `view` (a part of this mapping) from this process: a reader done with a
    // record keeps its resident memory bounded by what it is reading now, whatever the file's size.
    // The page cache keeps them; touching them again faults them back in.
    void release(ByteView view) const;
    // Tells the kernel `view` (of this mapping) will be read once, front to back: more read-ahead,
    // and its pages are the first to go under memory pressure.
    void advise_sequential(ByteView view) const;

private:
    MappedFile() = default;
    void map(int fd);
    std::string m_path;
    int m_fd = -1;
    void* m_data = nullptr;
    uint64_t m_size = 0;
};

// A small text file (an allow-list, DeepSpeed's `latest`) read whole. Like MappedFile, it refuses what
// is no regular file without blocking (a FIFO is opened non-blocking and refused), and a file larger
// than `max_bytes`. Error(io) naming the path.
std::string read_text_file(const std::string& path, uint64_t max_bytes, const std::string& what);

// A reader moving forward through `data` (a part of a file's mapping, or of memory the file does not
// map: then nothing is given back) gives the pages a step (1 MiB) behind where it is back as it goes:
// a pickle of 16 MiB read once is not resident whole beside the reader's tables. Touching a page
// again faults it back in from the page cache; a step back (a reader that jumps) only costs that.
class PagesBehind {
public:
    // `from`: where the reader starts (what lies before is not its to give back).
    PagesBehind(const MappedFile* file, ByteView data, uint64_t from = 0) : m_file(file), m_data(data), m_given_back(from) {}
    void at(uint64_t pos) {
        if (!m_file || pos < m_given_back + 2 * k_step || pos > m_data.size) return;
        m_file->release({m_data.data + m_given_back, pos - k_step - m_given_back});
        m_given_back = pos - k_step;
    }
    uint64_t given_back() const { return m_given_back; }  // what lies before this is given back
    // The reader is done: the rest goes too.
    void done() {
        if (m_file && m_data.size > m_given_back) m_file->release({m_data.data + m_given_back, m_data.size - m_given_back});
        m_given_back = m_data.size;
    }

private:
    static constexpr uint64_t k_step = 1u << 20;
    const MappedFile* m_file;
    ByteView m_data;
    uint64_t m_given_back;
};

}  // namespace ckpt
