// Writes an output file front to back. Small writes and small copies gather in one buffer that goes
// out in one pwrite when full; large ones go straight to the file (a copy by copy_file_range, so its
// bytes never pass through this process). A checkpoint of 100,000 tensors of 64 bytes otherwise costs
// a header write and a copy syscall per record (docs/performance.md). Private to the library.
#pragma once

#include <cstdint>
#include <string>

#include "ckpt/atomic_file.hpp"
#include "ckpt/bytes.hpp"

namespace ckpt {

class MappedFile;

class OutputWriter {
public:
    // Below this, a copy goes through the buffer; the buffer is written out past k_flush bytes.
    static constexpr uint64_t k_small = 64u << 10;
    static constexpr size_t k_flush = 1u << 20;

    // `path` names the output in errors; writing starts at `start`.
    OutputWriter(int fd, std::string path, uint64_t start = 0);
    OutputWriter(const OutputWriter&) = delete;
    OutputWriter& operator=(const OutputWriter&) = delete;

    void write(const void* data, size_t size);
    void write(ByteView v) { write(v.data, v.size); }
    // Bytes [offset, offset + size) of `src`: a small range read from its mapping into the buffer,
    // a large one copied by the kernel.
    void copy(const MappedFile& src, uint64_t offset, uint64_t size);
    // The same from a file known by its descriptor alone: always by the kernel.
    void copy(int src_fd, uint64_t offset, uint64_t size);
    // The next write goes to `pos` (at or past the end so far): what lies between stays a hole.
    void seek(uint64_t pos);
    // Bytes already written (or buffered) at `pos` written over with `size` new ones.
    void patch(uint64_t pos, const void* data, size_t size);
    // Writes the buffer out; the destructor does not (a writer dropped by an error leaves the output
    // to its AtomicFile, which discards it).
    void flush();
    uint64_t pos() const { return m_pos; }
    const std::string& path() const { return m_path; }

private:
    void release_source();

    int m_fd;
    std::string m_path;
    uint64_t m_pos;       // where the next byte goes
    uint64_t m_buf_at;    // the file offset of m_buf[0]
    std::string m_buf;
    WritebackHint m_writeback;
    // The source pages read into the buffer since the last flush, dropped from this process then
    // (they stay in the page cache): a copy of many small records does not hold the input resident.
    const MappedFile* m_src = nullptr;
    uint64_t m_src_begin = 0, m_src_end = 0;
};

}  // namespace ckpt
