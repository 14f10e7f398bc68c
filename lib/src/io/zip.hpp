// Zip archive reader over a byte view (a mapping). torch.save writes an ordinary zip; see zip.cpp for
// the on-disk layout this reader checks field by field.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/bytes.hpp"
#include "base/string_index.hpp"

namespace ckpt {

struct ZipEntry {
    std::string_view name;          // in the central directory: valid while the mapping is
    uint16_t method = 0;            // 0 STORED, 8 DEFLATE
    uint16_t flags = 0;
    uint32_t crc32 = 0;             // as recorded in the central directory
    uint64_t compressed_size = 0;
    uint64_t size = 0;              // uncompressed
    uint64_t local_header_offset = 0;
    uint64_t central_offset = 0;    // where the entry's central directory record starts
};

// The bytes of one record: a view into the mapping for STORED records, an owned inflated buffer for
// DEFLATE ones. Either way `view()` stays valid while the RecordData lives.
class RecordData {
public:
    RecordData() = default;
    explicit RecordData(ByteView view) : m_view(view) {}
    explicit RecordData(std::vector<uint8_t> owned)
        : m_owned(std::make_shared<std::vector<uint8_t>>(std::move(owned))) {
        m_view = {m_owned->data(), m_owned->size()};
    }
    // Bytes in a buffer that `keep` keeps alive (a merged record, gathered into a reused buffer).
    RecordData(std::shared_ptr<const void> keep, ByteView view) : m_keep(std::move(keep)), m_view(view) {}
    ByteView view() const { return m_view; }
    bool owned() const { return m_owned != nullptr || m_keep != nullptr; }

private:
    std::shared_ptr<std::vector<uint8_t>> m_owned;
    std::shared_ptr<const void> m_keep;
    ByteView m_view;
};

struct ZipLimits {
    uint64_t max_entries = 10'000'000;
    uint64_t max_inflated_size = 64ull << 30;  // one DEFLATE record, inflated
    uint64_t max_inflate_ratio = 1100;         // DEFLATE cannot do better than ~1032:1
    // Read as torch's reader (miniz) does, for the scanner: general-purpose flags (encryption bits)
    // ignored, a local header whose name or method differs from the directory's taken by the
    // directory, repeated names and unknown methods kept as entries (record_data refuses those).
    bool tolerant = false;
};

class ZipArchive {
public:
    // Reads the end-of-central-directory record (ZIP64 when present) and the whole central directory.
    // Throws Error(format) when there is no zip here, Error(corrupt) when there is a broken one.
    // Local headers are read lazily (record_data), so opening touches only the directory.
    static ZipArchive open(ByteView file, ZipLimits limits = {});

    // True when `file` starts like a zip (local header signature).
    static bool sniff(ByteView file);

    const std::vector<ZipEntry>& entries() const { return m_entries; }
    const ZipEntry* find(std::string_view name) const;

    // Where the record's data starts in the file (reads and checks the local header).
    uint64_t data_offset(const ZipEntry& entry) const;
    // The same, reading the header of a record of 64 KiB and more with pread from `fd` (the file this
    // archive maps): a writer that visits every large record then reads ~30+name bytes of each instead
    // of faulting in the 64 KiB the kernel maps around every touched page. A smaller record's header is
    // read from the mapping, as its bytes are (OutputWriter copies them through it), without a syscall.
    uint64_t data_offset(const ZipEntry& entry, int fd) const;
    // The record's bytes, inflated if needed (and checked against the size in the directory).
    RecordData record_data(const ZipEntry& entry) const;
    // Its first `max` bytes (fewer when it is shorter), inflating no more than that.
    RecordData record_prefix(const ZipEntry& entry, uint64_t max) const;
    // CRC-32 of the record's (uncompressed) bytes, computed now.
    uint32_t compute_crc32(const ZipEntry& entry) const;
    // The record's frame, checked without reading its data: its local header (as data_offset checks
    // it) and, when it has one (flag bit 3: torch writes one after every record), the data descriptor
    // after the data, whose CRC-32 must be the directory's. Empty when both hold; else what is wrong,
    // in words; `data_readable` (when given) says whether the data can still be found (only the
    // descriptor is wrong). A record whose data another save overwrote fails it, without a byte of
    // it hashed.
    std::string frame_problem(const ZipEntry& entry, bool* data_readable = nullptr) const;

    bool zip64() const { return m_zip64; }
    uint64_t central_directory_offset() const { return m_cd_offset; }
    uint64_t central_directory_size() const { return m_cd_size; }
    // Its bytes, which the entries' names view.
    ByteView central_directory() const { return *m_file.sub(m_cd_offset, m_cd_size); }

private:
    // A record's local header as read: where its data starts, or what is wrong with it (and where).
    struct LocalHeader {
        uint64_t start = 0;
        std::string problem;  // "" when it holds
        uint64_t at = 0;
    };
    LocalHeader read_local_header(const ZipEntry& entry, ByteView header) const;  // never throws
    LocalHeader local_header(const ZipEntry& entry) const;                        // through the mapping
    uint64_t check_local_header(const ZipEntry& entry, ByteView header) const;    // throws what is wrong
    auto name_at() const {
        return [this](size_t pos) -> std::string_view { return m_entries[pos].name; };
    }

    ByteView m_file;
    ZipLimits m_limits;
    std::vector<ZipEntry> m_entries;
    StringIndex m_by_name;
    bool m_zip64 = false;
    uint64_t m_cd_offset = 0;
    uint64_t m_cd_size = 0;
};

// CRC-32 (zlib's polynomial) of a view, continuing from `crc`: carry-less multiply where the CPU has
// it (~10× zlib's speed), zlib otherwise. Views past 4 GiB work.
uint32_t crc32_of(ByteView view, uint32_t crc = 0);
// The same through zlib alone (the reference the fast path is tested against).
uint32_t crc32_portable(ByteView view, uint32_t crc = 0);

}  // namespace ckpt
