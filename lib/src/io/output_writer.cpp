#include "io/output_writer.hpp"

#include <algorithm>
#include <cstring>

#include "ckpt/error.hpp"
#include "io/mapped_file.hpp"

namespace ckpt {

OutputWriter::OutputWriter(int fd, std::string path, uint64_t start)
    : m_fd(fd), m_path(std::move(path)), m_pos(start), m_buf_at(start), m_writeback(fd) {
    m_buf.reserve(k_flush + k_small);
}

void OutputWriter::write(const void* data, size_t size) {
    if (size >= k_flush) {
        flush();
        write_all(m_fd, data, size, m_pos, m_path);
        m_pos += size;
        m_buf_at = m_pos;
        m_writeback.written_up_to(m_pos);
        return;
    }
    m_buf.append(static_cast<const char*>(data), size);
    m_pos += size;
    if (m_buf.size() >= k_flush) flush();
}

void OutputWriter::copy(const MappedFile& src, uint64_t offset, uint64_t size) {
    ByteView all = src.view();
    if (size >= k_small || !all.data || offset > all.size || size > all.size - offset) return copy(src.fd(), offset, size);
    if (m_src != &src) {
        release_source();
        m_src = &src;
        m_src_begin = offset;
    }
    m_src_begin = std::min(m_src_begin, offset);
    m_src_end = std::max(m_src_end, offset + size);
    write(all.data + offset, static_cast<size_t>(size));
}

void OutputWriter::copy(int src_fd, uint64_t offset, uint64_t size) {
    flush();
    copy_range(src_fd, offset, m_fd, m_pos, size, m_path);
    m_pos += size;
    m_buf_at = m_pos;
    m_writeback.written_up_to(m_pos);
}

void OutputWriter::seek(uint64_t pos) {
    if (pos == m_pos) return;
    if (pos < m_pos) throw Error(ErrorKind::usage, m_path, "internal: output written out of order");
    flush();
    m_pos = m_buf_at = pos;
}

void OutputWriter::patch(uint64_t pos, const void* data, size_t size) {
    if (pos + size > m_pos) throw Error(ErrorKind::usage, m_path, "internal: a patch past what was written");
    if (pos < m_buf_at && pos + size > m_buf_at) flush();  // straddles the buffer's start
    if (pos >= m_buf_at) std::memcpy(&m_buf[pos - m_buf_at], data, size);
    else write_all(m_fd, data, size, pos, m_path);
}

void OutputWriter::flush() {
    if (!m_buf.empty()) {
        write_all(m_fd, m_buf.data(), m_buf.size(), m_buf_at, m_path);
        m_buf.clear();
        m_writeback.written_up_to(m_pos);
    }
    m_buf_at = m_pos;
    release_source();
}

void OutputWriter::release_source() {
    if (m_src && m_src_end > m_src_begin) m_src->release(*m_src->view().sub(m_src_begin, m_src_end - m_src_begin));
    m_src = nullptr;
    m_src_begin = m_src_end = 0;
}

}  // namespace ckpt
