// A read-only memory mapping of a whole file. Tensor bytes are touched only where a command reads them;
// `inspect` touches the zip directory and data.pkl, nothing else.
#pragma once

#include <string>

#include "ckpt/bytes.hpp"

namespace ckpt {

class MappedFile {
public:
    // Throws Error(io) when the file cannot be opened or mapped, naming the path.
    explicit MappedFile(const std::string& path);
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
    std::string m_path;
    int m_fd = -1;
    void* m_data = nullptr;
    uint64_t m_size = 0;
};

}  // namespace ckpt
