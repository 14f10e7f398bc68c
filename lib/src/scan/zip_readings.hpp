// One zip, read as each of two readers reads it. A scanner that reads a zip one way while the loader
// reads it another is blind to the difference (picklescan's CVE-2025-1944, CVE-2025-10156), so scan
// reads every zip both ways and reports where they part:
//   - torch's: the miniz of PyTorchStreamReader (torch.load, torch.jit.load; torch 1.13–2.6): the end
//     record the highest one within ~68 KiB of the end, offsets taken literally, exactly the entry
//     count the end record gives, names looked up case-insensitively by binary search over a heap
//     sort, a member's data where its local header's name and extra lengths say, CRCs never checked,
//     a stored member read for its uncompressed size;
//   - Python's zipfile (numpy.load's .npz, torch.export.load, the Python scanners): the end record by
//     rfind in the last 64 KiB, offsets shifted by the bytes before the archive, the directory walked
//     by its byte size, the last of two equal names winning, a local header whose name differs refused.
// The facts and their sources: docs/hardening.md, "How scan reads a zip".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ckpt/bytes.hpp"

namespace ckpt {

struct ZipMember {
    std::string_view name;     // the directory's name bytes (zipfile: cut at a NUL)
    std::string_view raw_name; // the directory's name bytes, whole
    uint64_t central = 0;      // its directory record
    uint64_t local = 0;        // its local header, as this reader places it
    uint64_t data = 0;         // where its data starts (0 when the local header cannot be read)
    uint64_t comp = 0, size = 0;
    uint32_t crc = 0;
    uint16_t method = 0, flags = 0;
    std::string_view local_name;  // the local header's name
    std::string unreadable;    // why this reader refuses to hand its bytes over ("" when it does)
    bool local_read = false;   // read_local_header has filled data, local_name and what they decide
};

struct ZipReading {
    const char* reader = "";   // "torch" or "zipfile"
    std::string problem;       // why the archive as a whole does not open ("" when it does)
    uint64_t eocd = 0, cd_offset = 0, cd_size = 0, entries = 0;
    int64_t shift = 0;         // zipfile: bytes before the archive, added to every offset
    bool zip64 = false;
    std::vector<ZipMember> members;  // in directory order
    // torch: members by their name with ASCII case folded (the first of each); `ambiguous`: some
    // folded name is there twice, and then `sorted` is the heap-sorted order torch's lookups search.
    struct FoldHash { size_t operator()(std::string_view s) const; };
    struct FoldEq { bool operator()(std::string_view a, std::string_view b) const; };
    std::unordered_map<std::string_view, uint32_t, FoldHash, FoldEq> by_folded_name;
    bool ambiguous = false;
    std::vector<uint32_t> sorted;
    bool ok() const { return problem.empty(); }
};

// The directory only: no local header is read (a 1 GiB checkpoint's 2,000 storages would each fault a
// page in); read_local_header reads a member's when its bytes are wanted.
ZipReading read_zip_as_torch(ByteView file);
ZipReading read_zip_as_zipfile(ByteView file);
// Whether the zip zipfile reads from the end of `file` is, byte for byte, the one it reads from
// `part` (a span of `file`, a tar's last member) alone: the same directory, every member's local
// header at the same place of the file. Then reading the file as a zip reads nothing the part's own
// scan does not (a .nemo: a tar whose last member is a torch.save archive).
bool zipfile_reads_only(ByteView file, ByteView part);
// Where a member's data starts, from its local header as the reader reads it (both take the local
// name and extra lengths; zipfile refuses a local name that differs from the directory's).
void read_local_header(ByteView file, const ZipReading& z, ZipMember& m);

// The member each reader hands over for `name`, or SIZE_MAX: torch's binary search (ASCII case
// folded; which of two equal names it meets depends on the sort), zipfile's last exact match.
size_t torch_find(const ZipReading& z, ByteView file, std::string_view name);
size_t zipfile_find(const ZipReading& z, std::string_view name);
// torch's archive root: the first directory entry's name up to its first '/' ("" when it has none).
std::string_view torch_root(const ZipReading& z);

// The bytes a reader hands to its loader: stored, a view (torch: `size` bytes from the data start,
// zipfile: `comp` bytes cut to `size`); DEFLATE, inflated into `owned` up to `cap` bytes (torch:
// up to `size`, keeping what came before a break; zipfile: to the stream's end). `problem` says
// what cut it short.
ByteView member_bytes(ByteView file, const ZipReading& z, const ZipMember& m, uint64_t cap,
                      std::vector<uint8_t>& owned, std::string& problem);

// Where the two readings part, one line each (empty when they hand every name the same bytes): the
// end records, the directories, entry counts, names two readers resolve to different members, names
// one of them refuses (a local header the caller has read), stored sizes, NULs in names.
std::vector<std::string> zip_disagreements(const ZipReading& torch, const ZipReading& zipfile, ByteView file);

}  // namespace ckpt
