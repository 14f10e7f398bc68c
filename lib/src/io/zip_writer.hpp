// Writes a zip the way torch.save lays one out, so torch (and any zip tool) reads it natively:
//   per record:  local header (sig 0x04034b50, version 45 if ZIP64 else 20, flags 0x0800 UTF-8 names,
//                method 0 STORED, CRC-32 and sizes filled in — no data descriptor) · name · extra
//                fields: ZIP64 (id 0x0001: size, compressed size) when a size does not fit 32 bits,
//                then "FB" padding (id 0x4246, 'Z' bytes) so the data starts on a 64-byte boundary ·
//                the data
//   then:        central directory (one record per entry, ZIP64 extra for sizes/offsets past 32 bits)
//                · ZIP64 end record · ZIP64 locator · end record — torch writes the ZIP64 pair on every
//                file, and so does this writer.
// Writes go through an OutputWriter: headers and small records gather into large writes, and a large
// record copied from another file never passes through this process (copy_file_range).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/atomic_file.hpp"
#include "ckpt/bytes.hpp"
#include "ckpt/text_store.hpp"
#include "io/output_writer.hpp"

namespace ckpt {

class ZipWriter {
public:
    static constexpr uint64_t k_alignment = 64;

    // `path` names the output in errors.
    ZipWriter(int fd, std::string path) : m_out(fd, std::move(path)) {}

    // A record from memory.
    void add(std::string_view name, ByteView data, uint32_t crc32);
    // A record of `size` bytes with a known CRC-32, written in pieces: `pieces(write)` calls
    // write(data, n) for each, in order, and they must add up to `size`.
    template <class Pieces>
    void add_pieces(std::string_view name, uint64_t size, uint32_t crc32, Pieces&& pieces) {
        begin_record(name, size, crc32);
        uint64_t written = 0;
        pieces([&](const char* data, size_t n) {
            m_out.write(data, n);
            written += n;
        });
        if (written != size) size_mismatch(name, size, written);
    }
    // A record whose CRC-32 is known only once its bytes are written: `pieces(write)` writes them
    // as add_pieces's does and returns their CRC-32, which is then put in the local header (still
    // in the writer's buffer, or written over in the file) and the central directory.
    template <class Pieces>
    void add_streamed(std::string_view name, uint64_t size, Pieces&& pieces) {
        begin_record(name, size, 0);
        uint64_t written = 0;
        uint32_t crc = pieces([&](const void* data, size_t n) {
            m_out.write(data, n);
            written += n;
        });
        if (written != size) size_mismatch(name, size, written);
        set_crc(crc);
    }
    // A record copied from `src` (bytes [offset, offset + size)) with a known CRC-32.
    void add_copy(std::string_view name, const MappedFile& src, uint64_t offset, uint64_t size, uint32_t crc32);
    // Central directory and end records, and everything still buffered. Returns the file's size.
    uint64_t finish();

    size_t records() const { return m_entries.size(); }

private:
    struct Written {
        std::string_view name;  // kept in m_names
        uint32_t crc32;
        uint64_t size, header_offset;
    };
    void begin_record(std::string_view name, uint64_t size, uint32_t crc32);
    void set_crc(uint32_t crc32);  // of the last record begun
    [[noreturn]] void size_mismatch(std::string_view name, uint64_t size, uint64_t written) const;

    OutputWriter m_out;
    std::string m_header;  // the local header being written (its buffer kept from record to record)
    std::vector<Written> m_entries;
    TextStore m_names;  // the records' names: one block per 64 KiB, not a string each
};

}  // namespace ckpt
