#include "io/zip_writer.hpp"

#include <limits>

#include "ckpt/atomic_file.hpp"
#include "ckpt/error.hpp"
#include "io/mapped_file.hpp"

namespace ckpt {

namespace {

constexpr uint32_t k_u32_max = std::numeric_limits<uint32_t>::max();

void put16(std::string& b, uint64_t v) { append_le(b, v, 2); }
void put32(std::string& b, uint64_t v) { append_le(b, v, 4); }
void put64(std::string& b, uint64_t v) { append_le(b, v, 8); }

}  // namespace

void ZipWriter::begin_record(std::string_view name, uint64_t size, uint32_t crc32) {
    if (name.size() > 0xffff) throw Error(ErrorKind::usage, m_out.path(), "record name too long: " + std::string(name));
    bool zip64 = size >= k_u32_max;
    uint64_t at = m_out.pos();
    uint64_t fixed = 30 + name.size() + (zip64 ? 20 : 0);
    uint64_t pad = (k_alignment - (at + fixed + 4) % k_alignment) % k_alignment;
    std::string& h = m_header;
    h.clear();
    put32(h, 0x04034b50);
    put16(h, zip64 ? 45 : 20);
    put16(h, 0x0800);
    put16(h, 0);           // STORED
    put16(h, 0);           // time
    put16(h, 0x21);        // date: 1980-01-01, as torch writes
    put32(h, crc32);
    put32(h, zip64 ? k_u32_max : size);
    put32(h, zip64 ? k_u32_max : size);
    put16(h, name.size());
    put16(h, (zip64 ? 20 : 0) + 4 + pad);
    h += name;
    if (zip64) {
        put16(h, 0x0001);
        put16(h, 16);
        put64(h, size);
        put64(h, size);
    }
    put16(h, 0x4246);  // "FB"
    put16(h, pad);
    h.append(pad, 'Z');
    m_out.write(h.data(), h.size());
    m_entries.push_back({m_names.keep(name), crc32, size, at});
}

void ZipWriter::set_crc(uint32_t crc32) {
    Written& e = m_entries.back();
    e.crc32 = crc32;
    std::string b;
    put32(b, crc32);
    m_out.patch(e.header_offset + 14, b.data(), b.size());  // the local header's CRC-32 field
}

void ZipWriter::size_mismatch(std::string_view name, uint64_t size, uint64_t written) const {
    throw Error(ErrorKind::io, m_out.path(), "internal: record " + std::string(name) + " was to hold " + std::to_string(size) +
                                                 " bytes, " + std::to_string(written) + " were written");
}

void ZipWriter::add(std::string_view name, ByteView data, uint32_t crc32) {
    begin_record(name, data.size, crc32);
    m_out.write(data);
}

void ZipWriter::add_copy(std::string_view name, const MappedFile& src, uint64_t offset, uint64_t size,
                         uint32_t crc32) {
    begin_record(name, size, crc32);
    m_out.copy(src, offset, size);
}

uint64_t ZipWriter::finish() {
    // An entry at a time into the writer's buffer (the directory of 100,000 records was a 12 MiB
    // string of its own).
    uint64_t cd_offset = m_out.pos();
    std::string cd, extra;
    for (const Written& e : m_entries) {
        cd.clear();
        extra.clear();
        bool big_size = e.size >= k_u32_max, big_offset = e.header_offset >= k_u32_max;
        if (big_size || big_offset) {
            put16(extra, 0x0001);
            put16(extra, (big_size ? 16 : 0) + (big_offset ? 8 : 0));
            if (big_size) {
                put64(extra, e.size);
                put64(extra, e.size);
            }
            if (big_offset) put64(extra, e.header_offset);
        }
        put32(cd, 0x02014b50);
        put16(cd, 0x031e);  // made by: Unix, spec 3.0
        put16(cd, extra.empty() ? 20 : 45);
        put16(cd, 0x0800);
        put16(cd, 0);
        put16(cd, 0);
        put16(cd, 0x21);
        put32(cd, e.crc32);
        put32(cd, big_size ? k_u32_max : e.size);
        put32(cd, big_size ? k_u32_max : e.size);
        put16(cd, e.name.size());
        put16(cd, extra.size());
        put16(cd, 0);  // comment
        put16(cd, 0);  // disk
        put16(cd, 0);  // internal attributes
        put32(cd, 0100644u << 16);  // external: a regular file, rw-r--r--
        put32(cd, big_offset ? k_u32_max : e.header_offset);
        cd += e.name;
        cd += extra;
        m_out.write(cd.data(), cd.size());
    }
    cd.clear();
    uint64_t cd_size = m_out.pos() - cd_offset, n = m_entries.size();
    uint64_t zip64_end = cd_offset + cd_size;
    put32(cd, 0x06064b50);
    put64(cd, 44);
    put16(cd, 0x031e);
    put16(cd, 45);
    put32(cd, 0);
    put32(cd, 0);
    put64(cd, n);
    put64(cd, n);
    put64(cd, cd_size);
    put64(cd, cd_offset);
    put32(cd, 0x07064b50);
    put32(cd, 0);
    put64(cd, zip64_end);
    put32(cd, 1);
    put32(cd, 0x06054b50);
    put16(cd, 0);
    put16(cd, 0);
    put16(cd, n >= 0xffff ? 0xffff : n);
    put16(cd, n >= 0xffff ? 0xffff : n);
    put32(cd, cd_size >= k_u32_max ? k_u32_max : cd_size);
    put32(cd, cd_offset >= k_u32_max ? k_u32_max : cd_offset);
    put16(cd, 0);
    m_out.write(cd.data(), cd.size());
    m_out.flush();
    return m_out.pos();
}

}  // namespace ckpt
