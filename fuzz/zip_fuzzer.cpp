// The zip reader on any bytes: ZipArchive::open (EOCD, ZIP64, the central directory), then each
// entry's local header and record data (STORED views, DEFLATE inflated and checked), and its CRC-32.
// Inflation is bounded here by the entry's declared size, so one input costs at most ~64 MiB of output.
#include <cstdint>
#include <cstdlib>

#include "ckpt/error.hpp"
#include "io/zip.hpp"

namespace {
constexpr size_t k_max_entries = 256;
constexpr uint64_t k_max_record = 16ull << 20;
constexpr uint64_t k_max_total = 64ull << 20;
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    ckpt::ByteView file{data, size};
    (void)ckpt::ZipArchive::sniff(file);
    try {
        ckpt::ZipArchive zip = ckpt::ZipArchive::open(file);
        (void)zip.zip64();
        uint64_t total = 0;
        size_t n = 0;
        for (const ckpt::ZipEntry& e : zip.entries()) {
            if (++n > k_max_entries) break;
            // The lookup by name must find an entry of that name (the first of duplicates).
            const ckpt::ZipEntry* found = zip.find(e.name);
            if (!found || found->name != e.name) std::abort();
            // The frame check never throws: what is wrong is its answer. A record whose data it
            // says can be found must have a local header data_offset accepts.
            bool readable = true;
            std::string frame = zip.frame_problem(e, &readable);
            if (frame.empty() && !readable) std::abort();
            if (readable) try {
                    (void)zip.data_offset(e);
                } catch (const ckpt::Error&) {
                    std::abort();
                }
            try {
                (void)zip.data_offset(e);
                if (e.size > k_max_record || total + e.size > k_max_total) continue;
                total += e.size;
                ckpt::RecordData r = zip.record_data(e);
                // record_data checks the size against the directory: a view of another size is a bug.
                if (r.view().size != e.size) std::abort();
                uint32_t crc = ckpt::crc32_of(r.view());
                if (crc != ckpt::crc32_portable(r.view())) std::abort();
                if (zip.compute_crc32(e) != crc) std::abort();
            } catch (const ckpt::Error&) {
                // This record is refused; the others are still read.
            }
        }
    } catch (const ckpt::Error&) {
    }
    return 0;
}
