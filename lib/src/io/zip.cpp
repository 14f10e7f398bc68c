// Zip reader.
//
// On-disk layout (APPNOTE 6.3.x), all integers little-endian. Offsets below are within each record.
//
//   local file header (one per record, at ZipEntry::local_header_offset)
//     0  u32 signature 0x04034b50          14 u32 crc-32
//     4  u16 version needed                18 u32 compressed size   (0xffffffff: see ZIP64 extra)
//     6  u16 flags (bit 3: data descriptor) 22 u32 uncompressed size (0xffffffff: see ZIP64 extra)
//     8  u16 method (0 stored, 8 deflate)  26 u16 name length n
//    10  u16 mod time, 12 u16 mod date     28 u16 extra length m
//    30  name[n], extra[m], then the record's data. torch pads `extra` (id "FB") so data starts at a
//        multiple of 64.
//   central directory file header (one per record, contiguous)
//     0  u32 signature 0x02014b50          20 u32 compressed size
//     4  u16 version made by               24 u32 uncompressed size
//     6  u16 version needed                28 u16 name length n
//     8  u16 flags                         30 u16 extra length m
//    10  u16 method                        32 u16 comment length k
//    12  u16 time, 14 u16 date             34 u16 disk number start
//    16  u32 crc-32                        36 u16 internal attrs, 38 u32 external attrs
//    42  u32 local header offset           46 name[n], extra[m], comment[k]
//     ZIP64 extra field (id 0x0001): u64 uncompressed, u64 compressed, u64 local header offset,
//     u32 disk — each present only when its 32-bit field above is 0xffffffff (0xffff for the disk).
//   zip64 end of central directory record (optional)
//     0  u32 signature 0x06064b50   4 u64 size of the rest   12 u16 made by   14 u16 needed
//    16  u32 this disk  20 u32 cd disk  24 u64 entries here  32 u64 entries total
//    40  u64 cd size    48 u64 cd offset
//   zip64 end of central directory locator (20 bytes, right before the EOCD)
//     0  u32 signature 0x07064b50   4 u32 disk   8 u64 offset of the zip64 EOCD   16 u32 disks
//   end of central directory record (22 bytes + comment, within the last 65,557 bytes)
//     0  u32 signature 0x06054b50   4 u16 this disk   6 u16 cd disk   8 u16 entries here
//    10  u16 entries total         12 u32 cd size    16 u32 cd offset   20 u16 comment length
#include "io/zip.hpp"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/huge_pages.hpp"
#include "base/text_util.hpp"
#include "io/decompress.hpp"
#include "io/output_writer.hpp"

namespace ckpt {

namespace {

constexpr uint32_t k_local_sig = 0x04034b50;
constexpr uint32_t k_central_sig = 0x02014b50;
constexpr uint32_t k_eocd64_sig = 0x06064b50;
constexpr uint32_t k_eocd64_locator_sig = 0x07064b50;
constexpr uint64_t k_eocd_size = 22;
constexpr uint64_t k_central_fixed = 46;
constexpr uint64_t k_local_fixed = 30;

[[noreturn]] void corrupt(const std::string& what, uint64_t offset) {
    throw Error(ErrorKind::corrupt, "", "zip: " + what, offset);
}

uint32_t read_u32_at(ByteView file, uint64_t offset) {
    ByteReader r(file, "zip");
    r.seek(offset);
    return r.u32le();
}

// Finds the EOCD record by scanning back from the end for its signature, taking the last candidate
// whose comment length reaches exactly the end of the file.
uint64_t find_eocd(ByteView file) {
    if (file.size < k_eocd_size)
        throw Error(ErrorKind::format, "", "too small to be a zip archive (" +
                                               std::to_string(file.size) + " bytes)");
    uint64_t lowest = file.size > k_eocd_size + 0xffff ? file.size - k_eocd_size - 0xffff : 0;
    for (uint64_t pos = file.size - k_eocd_size + 1; pos-- > lowest;) {
        const uint8_t* p = file.data + pos;
        if (p[0] == 0x50 && p[1] == 0x4b && p[2] == 0x05 && p[3] == 0x06) {
            uint16_t comment = static_cast<uint16_t>(p[20] | (p[21] << 8));
            if (pos + k_eocd_size + comment == file.size) return pos;
        }
    }
    if (ZipArchive::sniff(file))  // a zip's start without its end: what a save cut short leaves
        throw Error(ErrorKind::corrupt, "",
                    "truncated or still being written: " + std::to_string(file.size) +
                        " bytes, and the end of the zip archive (the directory a torch.save file ends with) is missing");
    throw Error(ErrorKind::format, "", "no zip end-of-central-directory record");
}

}  // namespace

bool ZipArchive::sniff(ByteView file) {
    return file.size >= 4 && file.data[0] == 'P' && file.data[1] == 'K' && file.data[2] == 3 &&
           file.data[3] == 4;
}

ZipArchive ZipArchive::open(ByteView file, ZipLimits limits) {
    ZipArchive zip;
    zip.m_file = file;
    zip.m_limits = limits;

    uint64_t eocd = find_eocd(file);
    ByteReader er(file, "zip end-of-central-directory");
    er.seek(eocd + 4);
    uint16_t disk = er.u16le(), cd_disk = er.u16le();
    uint64_t count_here = er.u16le(), count = er.u16le();
    uint64_t cd_size = er.u32le(), cd_offset = er.u32le();
    if (disk != 0 || cd_disk != 0 || count_here != count)
        corrupt("multi-disk archives are not supported", eocd);

    bool needs64 = count == 0xffff || cd_size == 0xffffffff || cd_offset == 0xffffffff;
    if (eocd >= 20 && read_u32_at(file, eocd - 20) == k_eocd64_locator_sig) {
        ByteReader lr(file, "zip64 locator");
        lr.seek(eocd - 20 + 8);
        uint64_t eocd64 = lr.u64le();
        if (eocd64 > eocd - 20 || read_u32_at(file, eocd64) != k_eocd64_sig)
            corrupt("zip64 locator points to no zip64 end-of-central-directory record", eocd - 20);
        ByteReader r(file, "zip64 end-of-central-directory");
        r.seek(eocd64 + 24);
        uint64_t here64 = r.u64le();
        count = r.u64le();
        cd_size = r.u64le();
        cd_offset = r.u64le();
        if (here64 != count) corrupt("multi-disk archives are not supported", eocd64);
        zip.m_zip64 = true;
    } else if (needs64) {
        corrupt("directory fields say ZIP64 but there is no zip64 locator", eocd);
    }

    // The central directory must lie inside the file, before the EOCD records.
    auto cd_end = checked_add(cd_offset, cd_size);
    if (!cd_end || *cd_end > eocd)
        corrupt("central directory (offset " + std::to_string(cd_offset) + ", " +
                    std::to_string(cd_size) + " bytes) lies outside the file",
                eocd);
    // Each entry takes at least 46 bytes: a lying count costs nothing.
    if (count > cd_size / k_central_fixed || count > limits.max_entries)
        corrupt("central directory claims " + std::to_string(count) + " entries in " +
                    std::to_string(cd_size) + " bytes",
                eocd);
    zip.m_cd_offset = cd_offset;
    zip.m_cd_size = cd_size;

    ByteReader r(*file.sub(cd_offset, cd_size), "zip central directory", cd_offset);
    zip.m_entries.reserve(count);
    advise_huge_pages(zip.m_entries);
    zip.m_by_name.reserve(count);
    for (uint64_t i = 0; i < count; ++i) {
        ZipEntry e;
        e.central_offset = r.file_offset();
        if (r.u32le() != k_central_sig) {
            if (i == 0)  // the end of the file points where its start holds no directory
                corrupt("the directory the file's end points to is not there: the file's end and its start come from "
                        "different saves (two processes writing one path, or a shorter file written over a longer one)",
                        e.central_offset);
            corrupt("bad central directory signature (entry " + std::to_string(i + 1) + " of " + std::to_string(count) + ")",
                    e.central_offset);
        }
        r.u16le();  // made by
        r.u16le();  // needed
        e.flags = r.u16le();
        e.method = r.u16le();
        r.u16le();
        r.u16le();
        e.crc32 = r.u32le();
        e.compressed_size = r.u32le();
        e.size = r.u32le();
        uint16_t name_len = r.u16le(), extra_len = r.u16le(), comment_len = r.u16le();
        uint16_t disk_start = r.u16le();
        r.u16le();
        r.u32le();
        e.local_header_offset = r.u32le();
        e.name = r.bytes(name_len).as_chars();
        ByteReader x(r.bytes(extra_len), "zip extra field", r.file_offset() - extra_len);
        r.bytes(comment_len);
        while (x.remaining() >= 4) {
            uint16_t id = x.u16le(), len = x.u16le();
            ByteReader f(x.bytes(len), "zip64 extra field", x.file_offset() - len);
            if (id != 0x0001) continue;
            if (e.size == 0xffffffff) e.size = f.u64le();
            if (e.compressed_size == 0xffffffff) e.compressed_size = f.u64le();
            if (e.local_header_offset == 0xffffffff) e.local_header_offset = f.u64le();
            if (disk_start == 0xffff) disk_start = static_cast<uint16_t>(f.u32le());
        }
        if (disk_start != 0 && disk_start != 0xffff)
            corrupt("entry '" + std::string(e.name) + "' is on another disk", e.central_offset);
        if ((e.flags & 0x1) && !limits.tolerant) corrupt("entry '" + std::string(e.name) + "' is encrypted", e.central_offset);
        if (e.method != 0 && e.method != 8 && !limits.tolerant)
            throw Error(ErrorKind::unsupported, "",
                        "zip: entry '" + std::string(e.name) + "' uses compression method " +
                            std::to_string(e.method) + " (only stored and deflate are read)",
                        e.central_offset);
        if (e.method == 0 && e.compressed_size != e.size && !limits.tolerant)
            corrupt("stored entry '" + std::string(e.name) + "' has different compressed and plain sizes",
                    e.central_offset);
        // The record must fit before the central directory; checked without touching its bytes.
        auto end = checked_add(e.local_header_offset, k_local_fixed + name_len);
        auto data_end = end ? checked_add(*end, e.compressed_size) : std::nullopt;
        if (!data_end || *data_end > cd_offset)
            corrupt("entry '" + std::string(e.name) + "' (offset " + std::to_string(e.local_header_offset) +
                        ", " + std::to_string(e.compressed_size) +
                        " bytes) runs past the start of the central directory",
                    e.central_offset);
        if (!zip.m_by_name.insert(e.name, zip.m_entries.size(), zip.name_at()).second && !limits.tolerant)
            corrupt("duplicate entry '" + std::string(e.name) + "'", e.central_offset);
        zip.m_entries.push_back(std::move(e));
    }
    return zip;
}

const ZipEntry* ZipArchive::find(std::string_view name) const {
    size_t pos = m_by_name.find(name, name_at());
    return pos == StringIndex::npos ? nullptr : &m_entries[pos];
}

ZipArchive::LocalHeader ZipArchive::read_local_header(const ZipEntry& e, ByteView header) const {
    // Read in place once the fixed 30 bytes are known to be there (a reader with a context made
    // for each record was an allocation a record, for messages it never gave).
    auto le = [&](uint64_t at, int n) { return load_le(header.data + at, n); };
    if (header.size < 30 + (m_limits.tolerant ? 0 : e.name.size()) || le(0, 4) != k_local_sig)
        return {0, "bad local header signature for '" + std::string(e.name) + "'", e.local_header_offset};
    uint16_t method = static_cast<uint16_t>(le(8, 2));
    uint16_t name_len = static_cast<uint16_t>(le(26, 2)), extra_len = static_cast<uint16_t>(le(28, 2));
    if (method != e.method && !m_limits.tolerant)
        return {0, "local header of '" + std::string(e.name) + "' disagrees with the directory on the method", e.local_header_offset};
    if (!m_limits.tolerant &&
        (name_len != e.name.size() || std::string_view(reinterpret_cast<const char*>(header.data) + 30, name_len) != e.name))
        return {0, "local header name differs from the directory's '" + std::string(e.name) + "'", e.local_header_offset};
    uint64_t start = e.local_header_offset + 30 + name_len + extra_len;
    auto end = checked_add(start, e.compressed_size);
    if (!end || *end > m_cd_offset)
        return {0, "data of '" + std::string(e.name) + "' runs past the start of the central directory", start};
    return {start, "", 0};
}

ZipArchive::LocalHeader ZipArchive::local_header(const ZipEntry& e) const {
    // Tolerant: the local header's own name length counts, whatever the directory says.
    auto header = m_file.sub(e.local_header_offset, m_limits.tolerant ? 30 : 30 + e.name.size());
    if (!header) return {0, "local header of '" + std::string(e.name) + "' is past the end of the file", e.local_header_offset};
    return read_local_header(e, *header);
}

uint64_t ZipArchive::check_local_header(const ZipEntry& e, ByteView header) const {
    LocalHeader h = read_local_header(e, header);
    if (!h.problem.empty()) corrupt(h.problem, h.at);
    return h.start;
}

uint64_t ZipArchive::data_offset(const ZipEntry& e) const {
    LocalHeader h = local_header(e);
    if (!h.problem.empty()) corrupt(h.problem, h.at);
    return h.start;
}

std::string ZipArchive::frame_problem(const ZipEntry& e, bool* data_readable) const {
    using text::hex32;
    LocalHeader h = local_header(e);
    if (!h.problem.empty()) {
        if (data_readable) *data_readable = false;
        return h.problem + " (at byte " + std::to_string(h.at) + ")";
    }
    uint64_t start = h.start;
    if (!(e.flags & 0x8)) return "";
    constexpr uint32_t k_descriptor_sig = 0x08074b50;
    uint64_t at = start + e.compressed_size;  // before the directory: check_local_header saw to it
    auto word = m_file.sub(at, 8);
    if (!word || at + 8 > m_cd_offset) return "no data descriptor after the data of '" + std::string(e.name) + "'";
    uint32_t crc = static_cast<uint32_t>(load_le(word->data, 4));
    if (crc == k_descriptor_sig) crc = static_cast<uint32_t>(load_le(word->data + 4, 4));  // the optional signature
    if (crc == e.crc32) return "";
    return "the CRC-32 after the data of '" + std::string(e.name) + "' (" + hex32(crc) + ") is not the directory's (" +
           hex32(e.crc32) + ")";
}

uint64_t ZipArchive::data_offset(const ZipEntry& e, int fd) const {
    if (e.size < OutputWriter::k_small) return data_offset(e);  // its bytes are read through the mapping too
    std::vector<uint8_t> buf(30 + e.name.size());
    ssize_t n;
    do {
        n = ::pread(fd, buf.data(), buf.size(), static_cast<off_t>(e.local_header_offset));
    } while (n < 0 && errno == EINTR);
    if (n < 0) throw Error(ErrorKind::io, "", std::string("cannot read a local header: ") + std::strerror(errno));
    return check_local_header(e, {buf.data(), static_cast<uint64_t>(n)});
}

RecordData ZipArchive::record_data(const ZipEntry& e) const { return record_prefix(e, UINT64_MAX); }

RecordData ZipArchive::record_prefix(const ZipEntry& e, uint64_t max) const {
    uint64_t start = data_offset(e);
    ByteView raw = *m_file.sub(start, e.compressed_size);
    if (e.method == 0) return RecordData(max < raw.size ? *raw.sub(0, max) : raw);
    if (e.method != 8)
        throw Error(ErrorKind::unsupported, "",
                    "zip: entry '" + std::string(e.name) + "' uses compression method " + std::to_string(e.method) +
                        " (only stored and deflate are read)",
                    start);
    bool whole = max >= e.size;

    // DEFLATE: refuse a size the directory does not justify before allocating anything.
    if (e.size > m_limits.max_inflated_size)
        throw Error(ErrorKind::limit, "",
                    "zip: entry '" + std::string(e.name) + "' inflates to " + std::to_string(e.size) +
                        " bytes, over the limit of " + std::to_string(m_limits.max_inflated_size),
                    start);
    auto cap = checked_mul(std::max<uint64_t>(e.compressed_size, 1), m_limits.max_inflate_ratio);
    if (cap && e.size > *cap + 4096)
        throw Error(ErrorKind::limit, "",
                    "zip: entry '" + std::string(e.name) + "' claims a compression ratio over " +
                        std::to_string(m_limits.max_inflate_ratio) + ":1 (a deflate bomb?)",
                    start);
    std::vector<uint8_t> out;
    out.reserve(whole ? e.size + 1 : max);
    // One byte of room past the size the directory says: a stream that runs longer shows it.
    int rc = inflate_into(raw, -MAX_WBITS, whole ? e.size + 1 : max, out).rc;
    uint64_t out_done = out.size();
    if (!whole && out_done == max) return RecordData(std::move(out));
    if (rc != Z_STREAM_END || out_done != e.size)
        corrupt("deflate data of '" + std::string(e.name) + "' is broken or does not inflate to the " +
                    std::to_string(e.size) + " bytes the directory says",
                start);
    return RecordData(std::move(out));
}

uint32_t ZipArchive::compute_crc32(const ZipEntry& e) const {
    return crc32_of(record_data(e).view());
}

}  // namespace ckpt
