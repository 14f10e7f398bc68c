// The two readings of a zip (zip_readings.hpp). Each follows its reader's source line for line where
// a difference can matter; field offsets are the zip reader's (io/zip.cpp's layout comment).
//   torch:   third_party/miniz-{2.1.0,3.0.2}/miniz.c: mz_zip_reader_locate_header_sig,
//            mz_zip_reader_read_central_dir, mz_zip_reader_sort_central_dir_offsets_by_filename,
//            mz_zip_locate_file_binary_search, mz_zip_reader_is_file_supported,
//            mz_zip_reader_extract_to_mem_no_alloc1 (CRC checks compiled out by PyTorch);
//            caffe2/serialize/inline_container.cc: the root is the first entry's name up to '/'.
//   zipfile: CPython Lib/zipfile.py: _EndRecData, _EndRecData64, _RealGetContents, _decodeExtra,
//            ZipFile.open.
#include "scan/zip_readings.hpp"

#include <zlib.h>

#include "io/decompress.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <unordered_map>
#include <unordered_set>

namespace ckpt {

namespace {

constexpr uint32_t k_local_sig = 0x04034b50, k_central_sig = 0x02014b50, k_eocd_sig = 0x06054b50;
constexpr uint32_t k_eocd64_sig = 0x06064b50, k_locator_sig = 0x07064b50;
constexpr uint64_t k_eocd = 22, k_central = 46, k_local = 30, k_eocd64 = 56, k_locator = 20;

struct Bad {
    std::string what;
};

class Bytes {
public:
    explicit Bytes(ByteView f) : m_f(f) {}
    bool has(uint64_t at, uint64_t n) const { return at <= m_f.size && n <= m_f.size - at; }
    uint64_t le(uint64_t at, int n) const {
        if (!has(at, static_cast<uint64_t>(n))) throw Bad{"reads past the end of the file"};
        return load_le(m_f.data + at, n);
    }
    uint32_t u32(uint64_t at) const { return static_cast<uint32_t>(le(at, 4)); }
    uint16_t u16(uint64_t at) const { return static_cast<uint16_t>(le(at, 2)); }
    std::string_view text(uint64_t at, uint64_t n) const {
        if (!has(at, n)) throw Bad{"reads past the end of the file"};
        return {reinterpret_cast<const char*>(m_f.data + at), n};
    }
    uint64_t size() const { return m_f.size; }

private:
    ByteView m_f;
};

uint8_t lower(uint8_t c) { return c >= 'A' && c <= 'Z' ? static_cast<uint8_t>(c + 32) : c; }

// mz_zip_reader_filename_less
bool name_less(std::string_view l, std::string_view r) {
    size_t n = std::min(l.size(), r.size());
    for (size_t i = 0; i < n; ++i) {
        uint8_t a = lower(static_cast<uint8_t>(l[i])), b = lower(static_cast<uint8_t>(r[i]));
        if (a != b) return a < b;
    }
    return l.size() < r.size();
}

// mz_zip_filename_compare (the query's length is strlen's: it ends at a NUL)
int name_compare(std::string_view l, std::string_view r) {
    size_t n = std::min(l.size(), r.size());
    for (size_t i = 0; i < n; ++i) {
        uint8_t a = lower(static_cast<uint8_t>(l[i])), b = lower(static_cast<uint8_t>(r[i]));
        if (a != b) return int(a) - int(b);
    }
    return static_cast<int>(static_cast<unsigned>(l.size()) - static_cast<unsigned>(r.size()));
}

// mz_zip_reader_sort_central_dir_offsets_by_filename: an unstable heap sort, reproduced step for step
// so that the one of two equal names a lookup meets is the one torch meets.
void heap_sort(const std::vector<ZipMember>& m, std::vector<uint32_t>& idx) {
    const uint64_t size = idx.size();
    if (size <= 1) return;
    auto less = [&](uint32_t a, uint32_t b) { return name_less(m[a].raw_name, m[b].raw_name); };
    uint64_t start = (size - 2) >> 1;
    for (;;) {
        uint64_t child, root = start;
        for (;;) {
            if ((child = (root << 1) + 1) >= size) break;
            child += ((child + 1) < size) && less(idx[child], idx[child + 1]);
            if (!less(idx[root], idx[child])) break;
            std::swap(idx[root], idx[child]);
            root = child;
        }
        if (!start) break;
        start--;
    }
    uint64_t end = size - 1;
    while (end > 0) {
        uint64_t child, root = 0;
        std::swap(idx[end], idx[0]);
        for (;;) {
            if ((child = (root << 1) + 1) >= end) break;
            child += ((child + 1) < end) && less(idx[child], idx[child + 1]);
            if (!less(idx[root], idx[child])) break;
            std::swap(idx[root], idx[child]);
            root = child;
        }
        end--;
    }
}

// mz_zip_reader_locate_header_sig: backwards in 4 KiB blocks overlapping by 3 bytes; the highest
// signature with 22 bytes after it wins; gives up ~64 KiB back. cur - 4093 is computed unsigned, so
// a block that would start below 0 but above it wraps and the read fails (kept: torch fails too).
bool torch_eocd(const Bytes& b, uint64_t& pos) {
    const uint64_t size = b.size();
    if (size < k_eocd) return false;
    int64_t cur = std::max<int64_t>(static_cast<int64_t>(size) - 4096, 0);
    for (;;) {
        if (cur < 0) return false;
        int64_t n = static_cast<int64_t>(std::min<uint64_t>(4096, size - static_cast<uint64_t>(cur)));
        for (int64_t i = n - 4; i >= 0; --i) {
            uint64_t at = static_cast<uint64_t>(cur + i);
            if (b.u32(at) == k_eocd_sig && size - at >= k_eocd) {
                pos = at;
                return true;
            }
        }
        if (!cur || size - static_cast<uint64_t>(cur) >= 0xffff + k_eocd) return false;
        cur = cur >= 4093 ? cur - 4093 : -1;
    }
}

// The zip64 extra field (0x0001) of a directory record: each 64-bit value present only for a 32-bit
// field that is 0xffffffff, in the order uncompressed, compressed, local header offset.
void zip64_extra(const Bytes& b, uint64_t at, uint64_t len, ZipMember& m, bool strict) {
    uint64_t end = at + len;
    while (end - at >= 4) {
        uint16_t id = b.u16(at), n = b.u16(at + 2);
        if (at + 4 + n > end) {
            if (strict) throw Bad{"a corrupt extra field"};
            return;
        }
        if (id == 0x0001) {
            uint64_t p = at + 4, q = at + 4 + n;
            auto take = [&](uint64_t& field) {
                if (field != 0xffffffff) return;
                if (p + 8 > q) {
                    if (strict) throw Bad{"a corrupt zip64 extra field"};
                    return;
                }
                field = b.le(p, 8);
                p += 8;
            };
            take(m.size);
            take(m.comp);
            take(m.local);
            return;
        }
        at += 4 + n;
    }
}

// One directory record at `at` (its signature already checked); returns its total length.
uint64_t central_record(const Bytes& b, uint64_t at, ZipMember& m, bool zipfile) {
    m.central = at;
    m.flags = b.u16(at + 8);
    m.method = b.u16(at + 10);
    m.crc = b.u32(at + 16);
    m.comp = b.u32(at + 20);
    m.size = b.u32(at + 24);
    uint16_t name_len = b.u16(at + 28), extra_len = b.u16(at + 30), comment_len = b.u16(at + 32);
    m.local = b.u32(at + 42);
    m.raw_name = b.text(at + k_central, name_len);
    m.name = m.raw_name;
    if (zipfile) {
        size_t nul = m.name.find('\0');
        if (nul != std::string_view::npos) m.name = m.name.substr(0, nul);
    }
    b.text(at + k_central + name_len, extra_len);
    zip64_extra(b, at + k_central + name_len, extra_len, m, zipfile);
    b.text(at + k_central + name_len + extra_len, comment_len);
    return k_central + name_len + extra_len + comment_len;
}

// Where a member's data starts, from its local header as both readers read it; 0 with `why` set when
// the header is not there.
uint64_t data_start(const Bytes& b, ZipMember& m, std::string& why) {
    if (!b.has(m.local, k_local) || b.u32(m.local) != k_local_sig) {
        why = "no local header where the directory says (byte " + std::to_string(m.local) + ")";
        return 0;
    }
    uint16_t name_len = b.u16(m.local + 26), extra_len = b.u16(m.local + 28);
    if (!b.has(m.local + k_local, name_len)) {
        why = "its local header runs past the end of the file";
        return 0;
    }
    m.local_name = b.text(m.local + k_local, name_len);
    return m.local + k_local + name_len + extra_len;
}

}  // namespace

ZipReading read_zip_as_torch(ByteView file) {
    ZipReading z;
    z.reader = "torch";
    Bytes b(file);
    try {
        uint64_t eocd;
        if (!torch_eocd(b, eocd)) throw Bad{"no end of central directory record within its reach of the end"};
        z.eocd = eocd;
        uint64_t total = b.u16(eocd + 10), here = b.u16(eocd + 8);
        uint64_t disk = b.u16(eocd + 4), cd_disk = b.u16(eocd + 6);
        uint64_t cd_size = b.u32(eocd + 12), cd_offset = b.u32(eocd + 16);
        if (eocd >= k_locator + k_eocd64 && b.u32(eocd - k_locator) == k_locator_sig) {
            uint64_t at = b.le(eocd - k_locator + 8, 8);
            if (at > b.size() - k_eocd64) throw Bad{"its zip64 locator points past the end"};
            if (b.u32(at) == k_eocd64_sig) {
                z.zip64 = true;
                if (b.le(at + 4, 8) < k_eocd64 - 12) throw Bad{"a zip64 end record too short"};
                if (b.u32(eocd - k_locator + 16) != 1) throw Bad{"a zip64 locator for several disks"};
                total = b.le(at + 32, 8);
                here = b.le(at + 24, 8);
                cd_size = b.le(at + 40, 8);
                cd_offset = b.le(at + 48, 8);
                disk = b.u32(at + 16);
                cd_disk = b.u32(at + 20);
                if (total > UINT32_MAX || here > UINT32_MAX || cd_size > UINT32_MAX) throw Bad{"a directory past miniz's limits"};
            }
        }
        if (total != here || ((disk | cd_disk) != 0 && (disk != 1 || cd_disk != 1))) throw Bad{"an archive on several disks"};
        if (cd_size < total * k_central) throw Bad{"a directory smaller than its entry count"};
        if (cd_offset + cd_size > b.size()) throw Bad{"a directory that runs past the end of the file"};
        z.cd_offset = cd_offset;
        z.cd_size = cd_size;
        z.entries = total;
        uint64_t at = cd_offset, left = cd_size;
        z.members.reserve(std::min<uint64_t>(total, 1u << 20));
        for (uint64_t i = 0; i < total; ++i) {
            if (left < k_central || b.u32(at) != k_central_sig) throw Bad{"directory entry " + std::to_string(i + 1) + " is not there"};
            ZipMember m;
            uint64_t len = central_record(b, at, m, false);
            uint32_t comp32 = b.u32(at + 20), size32 = b.u32(at + 24);
            if (comp32 != 0xffffffff && size32 != 0xffffffff) {
                // The method's 16 bits and the time's read as one 32-bit word (miniz reads it so).
                if ((b.u32(at + 10) == 0 && size32 != comp32) || (size32 && !comp32))
                    throw Bad{"entry '" + std::string(m.raw_name) + "' has sizes miniz refuses"};
            }
            uint16_t disk_start = b.u16(at + 34);
            if (disk_start == 0xffff || (disk_start != disk && disk_start != 1)) throw Bad{"an entry on another disk"};
            if (comp32 != 0xffffffff && static_cast<uint64_t>(b.u32(at + 42)) + k_local + comp32 > b.size())
                throw Bad{"entry '" + std::string(m.raw_name) + "' runs past the end of the file"};
            if (m.flags & 0x2000) throw Bad{"an entry with a masked local header"};
            if (len > left) throw Bad{"the directory's last entry runs past its size"};
            if (m.method != 0 && m.method != 8) m.unreadable = "compression method " + std::to_string(m.method);
            else if (m.flags & 0x41) m.unreadable = "encrypted";
            else if (m.flags & 0x20) m.unreadable = "a patch entry";
            z.members.push_back(m);
            at += len;
            left -= len;
        }
        z.by_folded_name.reserve(z.members.size());
        for (size_t i = 0; i < z.members.size(); ++i)
            z.ambiguous |= !z.by_folded_name.emplace(z.members[i].raw_name, static_cast<uint32_t>(i)).second;
        if (z.ambiguous) {  // which of two equal names a lookup meets: the sort decides
            z.sorted.resize(z.members.size());
            for (size_t i = 0; i < z.sorted.size(); ++i) z.sorted[i] = static_cast<uint32_t>(i);
            heap_sort(z.members, z.sorted);
        }
    } catch (const Bad& e) {
        z.problem = e.what;
        z.members.clear();
        z.sorted.clear();
        z.by_folded_name.clear();
    }
    return z;
}

ZipReading read_zip_as_zipfile(ByteView file) {
    ZipReading z;
    z.reader = "zipfile";
    Bytes b(file);
    try {
        const uint64_t size = b.size();
        if (size < k_eocd) throw Bad{"too small to be a zip"};
        uint64_t eocd = UINT64_MAX;
        if (b.u32(size - k_eocd) == k_eocd_sig && b.u16(size - 2) == 0) {
            eocd = size - k_eocd;
        } else {
            uint64_t lo = size > (1u << 16) + k_eocd ? size - (1u << 16) - k_eocd : 0;
            for (uint64_t p = size - 4 + 1; p-- > lo;)
                if (b.u32(p) == k_eocd_sig) {
                    eocd = p;
                    break;
                }
            if (eocd == UINT64_MAX) throw Bad{"no end of central directory record in the last 64 KiB"};
            if (size - eocd < k_eocd) throw Bad{"its last end record signature has no record after it"};
        }
        z.eocd = eocd;
        uint64_t cd_size = b.u32(eocd + 12), cd_offset = b.u32(eocd + 16);
        int64_t concat = static_cast<int64_t>(eocd) - static_cast<int64_t>(cd_size) - static_cast<int64_t>(cd_offset);
        if (eocd >= k_locator && b.u32(eocd - k_locator) == k_locator_sig) {
            uint32_t diskno = b.u32(eocd - k_locator + 4), disks = b.u32(eocd - k_locator + 16);
            if (diskno != 0 || disks > 1) throw Bad{"an archive on several disks"};
            // 3.11–3.13 read the zip64 end record just before the locator, not where it points.
            if (eocd >= k_locator + k_eocd64 && b.u32(eocd - k_locator - k_eocd64) == k_eocd64_sig) {
                uint64_t at = eocd - k_locator - k_eocd64;
                z.zip64 = true;
                cd_size = b.le(at + 40, 8);
                cd_offset = b.le(at + 48, 8);
                concat = static_cast<int64_t>(eocd) - static_cast<int64_t>(cd_size) - static_cast<int64_t>(cd_offset) -
                         static_cast<int64_t>(k_eocd64 + k_locator);
            }
        }
        int64_t start = static_cast<int64_t>(cd_offset) + concat;
        if (start < 0) throw Bad{"a directory offset before the start of the file"};
        z.shift = concat;
        z.cd_offset = static_cast<uint64_t>(start);
        z.cd_size = cd_size;
        uint64_t at = z.cd_offset, total = 0;
        if (!b.has(at, cd_size)) throw Bad{"a directory that runs past the end of the file"};
        z.members.reserve(std::min<uint64_t>(cd_size / k_central, 1u << 20));
        while (total < cd_size) {
            if (!b.has(at, k_central)) throw Bad{"a truncated central directory"};
            if (b.u32(at) != k_central_sig) throw Bad{"a bad magic number for a directory entry"};
            if ((b.u16(at + 6) & 0xff) > 63) throw Bad{"a zip file version past 6.3"};
            ZipMember m;
            uint64_t len = central_record(b, at, m, true);
            if ((m.flags & 0x800) == 0) {
                // cp437: every byte decodes
            } else {
                // UTF-8 names must decode
                std::string_view n = m.raw_name;
                for (size_t i = 0; i < n.size();) {
                    uint8_t c = static_cast<uint8_t>(n[i]);
                    size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
                    if (!k || i + k > n.size()) throw Bad{"a name that is not UTF-8 though flagged so"};
                    for (size_t j = 1; j < k; ++j)
                        if ((static_cast<uint8_t>(n[i + j]) & 0xc0) != 0x80) throw Bad{"a name that is not UTF-8 though flagged so"};
                    i += k;
                }
            }
            m.local = static_cast<uint64_t>(static_cast<int64_t>(m.local) + concat);
            if (m.flags & 0x1) m.unreadable = "encrypted (a password is asked for)";
            else if (m.flags & 0x60) m.unreadable = "a patch or strong-encryption entry";
            else if (m.method != 0 && m.method != 8 && m.method != 12 && m.method != 14)
                m.unreadable = "compression method " + std::to_string(m.method);
            z.members.push_back(m);
            at += len;
            total += len;
        }
        z.entries = z.members.size();
    } catch (const Bad& e) {
        z.problem = e.what;
        z.members.clear();
    }
    return z;
}

std::string_view torch_root(const ZipReading& z) {
    if (z.members.empty()) return {};
    std::string_view first = z.members[0].raw_name;
    size_t slash = first.find('/');
    return slash == std::string_view::npos ? std::string_view() : first.substr(0, slash);
}

void read_local_header(ByteView file, const ZipReading& z, ZipMember& m) {
    if (m.local_read) return;
    m.local_read = true;
    Bytes b(file);
    std::string why;
    try {
        m.data = data_start(b, m, why);
    } catch (const Bad& e) {
        m.data = 0;
        why = e.what;
    }
    bool torch = std::strcmp(z.reader, "torch") == 0;
    if (!m.unreadable.empty()) return;
    if (!m.data) m.unreadable = why;
    else if (!torch && m.local_name != m.raw_name) m.unreadable = "its local header names it '" + std::string(m.local_name) + "'";
    else if (!b.has(m.data, torch && m.method == 0 ? m.size : m.comp)) m.unreadable = "its data runs past the end of the file";
}

size_t ZipReading::FoldHash::operator()(std::string_view s) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the folded bytes
    for (char c : s) h = (h ^ lower(static_cast<uint8_t>(c))) * 1099511628211ull;
    return static_cast<size_t>(h);
}

bool ZipReading::FoldEq::operator()(std::string_view a, std::string_view b) const {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
        if (lower(static_cast<uint8_t>(a[i])) != lower(static_cast<uint8_t>(b[i]))) return false;
    return true;
}

size_t torch_find(const ZipReading& z, ByteView, std::string_view name) {
    size_t nul = name.find('\0');
    if (nul != std::string_view::npos) name = name.substr(0, nul);
    auto it = z.by_folded_name.find(name);
    if (it == z.by_folded_name.end()) return SIZE_MAX;
    if (!z.ambiguous) return it->second;  // one name of that spelling: any binary search meets it
    int64_t l = 0, h = static_cast<int64_t>(z.sorted.size()) - 1;
    while (l <= h) {
        int64_t m = l + ((h - l) >> 1);
        uint32_t i = z.sorted[static_cast<size_t>(m)];
        int c = name_compare(z.members[i].raw_name, name);
        if (!c) return i;
        if (c < 0) l = m + 1;
        else h = m - 1;
    }
    return SIZE_MAX;
}

size_t zipfile_find(const ZipReading& z, std::string_view name) {
    for (size_t i = z.members.size(); i-- > 0;)
        if (z.members[i].name == name) return i;
    return SIZE_MAX;
}

ByteView member_bytes(ByteView file, const ZipReading& z, const ZipMember& m, uint64_t cap,
                      std::vector<uint8_t>& owned, std::string& problem) {
    bool torch = std::strcmp(z.reader, "torch") == 0;
    owned.clear();
    problem.clear();
    if (!m.local_read) {
        problem = "its local header was not read";
        return {};
    }
    if (!m.data) {
        problem = m.unreadable;
        return {};
    }
    uint64_t avail = file.size - std::min(file.size, m.data);
    if (m.method == 0) {
        uint64_t n = torch ? m.size : std::min(m.comp, m.size);
        if (n > avail) {
            problem = "its data runs past the end of the file";
            n = avail;
        }
        return {file.data + m.data, std::min(n, cap)};
    }
    if (m.method != 8) {
        problem = "compression method " + std::to_string(m.method) + " is not opened here";
        return {};
    }
    uint64_t want = torch ? std::min(m.size, cap) : cap;
    owned.reserve(std::min<uint64_t>(want, std::max<uint64_t>(m.size, 64u << 10)));
    int rc = inflate_into({file.data + m.data, std::min(m.comp, avail)}, -MAX_WBITS, want, owned).rc;
    uint64_t out_done = owned.size();
    if (rc != Z_STREAM_END && out_done < want) problem = "its DEFLATE data is broken or cut short";
    else if (out_done >= cap && rc != Z_STREAM_END) problem = "more than " + std::to_string(cap) + " bytes once inflated";
    return {owned.data(), owned.size()};
}

std::vector<std::string> zip_disagreements(const ZipReading& t, const ZipReading& p, ByteView file) {
    std::vector<std::string> out;
    auto at = [](uint64_t o) { return "byte " + std::to_string(o); };
    if (!t.ok() || !p.ok()) return out;  // one reading alone: the caller says what that means
    if (t.eocd != p.eocd)
        out.push_back("two end records: torch.load takes the one at " + at(t.eocd) + ", Python's zipfile the one at " + at(p.eocd));
    if (t.cd_offset != p.cd_offset)
        out.push_back("the directory is at " + at(t.cd_offset) + " for torch.load and at " + at(p.cd_offset) +
                      " for Python's zipfile (" + std::to_string(p.shift) + " bytes before the archive shift its offsets)");
    if (t.members.size() != p.members.size())
        out.push_back("torch.load reads " + std::to_string(t.members.size()) + " directory entries (the end record's count), Python's zipfile " +
                      std::to_string(p.members.size()) + " (the directory's size)");
    // Each name either reader knows: the member each hands over for it (zipfile: the last of a name).
    std::unordered_map<std::string_view, size_t> last;
    last.reserve(p.members.size());
    for (size_t i = 0; i < p.members.size(); ++i) last[p.members[i].name] = i;
    size_t told = 0;
    if (t.ambiguous) {
        std::unordered_map<std::string_view, std::vector<size_t>, ZipReading::FoldHash, ZipReading::FoldEq> folded;
        for (size_t i = 0; i < t.members.size(); ++i) folded[t.members[i].raw_name].push_back(i);
        for (size_t k = 0; k < t.members.size() && told < 8; ++k) {
            const std::vector<size_t>& idx = folded[t.members[k].raw_name];
            if (idx.size() < 2 || idx[0] != k) continue;
            ++told;
            bool same = true;
            for (size_t i : idx) same &= t.members[i].raw_name == t.members[idx[0]].raw_name;
            out.push_back(std::to_string(idx.size()) + (same ? " entries named '" : " entries whose names differ only in case, '") +
                          std::string(t.members[idx[0]].raw_name) + "': which one a reader takes depends on the reader (torch.load's lookup ignores case)");
        }
    }
    auto compare = [&](std::string_view name) {
        size_t ti = torch_find(t, file, name);
        auto pi = last.find(name);
        if (ti == SIZE_MAX || pi == last.end()) return;
        const ZipMember &a = t.members[ti], &b = p.members[pi->second];
        if (a.local != b.local) {
            ++told;
            out.push_back("'" + std::string(name) + "' is the member at " + at(a.local) + " for torch.load and at " + at(b.local) + " for Python's zipfile");
        } else if (a.local_read && b.local_read && a.unreadable.empty() != b.unreadable.empty()) {
            ++told;
            out.push_back("'" + std::string(name) + "': " + (a.unreadable.empty() ? "torch.load reads it, Python's zipfile refuses it (" + b.unreadable + ")"
                                                                                   : "Python's zipfile reads it, torch.load refuses it (" + a.unreadable + ")"));
        } else if (a.method == 0 && a.comp != a.size && a.unreadable.empty()) {
            ++told;
            out.push_back("'" + std::string(name) + "' is stored with " + std::to_string(a.comp) + " bytes but claims " + std::to_string(a.size) +
                          ": torch.load reads " + std::to_string(a.size) + " bytes, Python's zipfile " + std::to_string(std::min(a.comp, a.size)));
        }
    };
    // The common case — one directory, read alike, no name twice even ignoring case — needs no
    // lookup by name: each entry is its own answer in both readings.
    bool alike = t.members.size() == p.members.size() && !t.ambiguous;
    for (size_t i = 0; alike && i < t.members.size(); ++i)
        alike = t.members[i].raw_name == p.members[i].name && t.members[i].local == p.members[i].local;
    if (alike) {
        for (size_t i = 0; i < t.members.size() && told < 16; ++i) {
            const ZipMember &a = t.members[i], &b = p.members[i];
            if ((a.local_read && b.local_read && a.unreadable.empty() != b.unreadable.empty()) ||
                (a.method == 0 && a.comp != a.size && a.unreadable.empty()))
                compare(a.raw_name);
        }
    } else {
        std::unordered_set<std::string_view> done;
        for (const ZipMember& m : t.members)
            if (told < 16 && done.insert(m.raw_name).second) compare(m.raw_name);
        for (const ZipMember& m : p.members)
            if (told < 16 && done.insert(m.name).second) compare(m.name);
    }
    for (const ZipMember& m : t.members) {
        if (told >= 16) break;
        if (m.raw_name.find('\0') != std::string_view::npos) {
            ++told;
            out.push_back("a name with a NUL in it ('" + std::string(m.name.substr(0, m.raw_name.find('\0'))) +
                          "\\0…'): Python's zipfile cuts it there, torch.load does not");
        }
    }
    return out;
}

bool zipfile_reads_only(ByteView file, ByteView part) {
    if (part.data < file.data || part.data + part.size > file.data + file.size) return false;
    ZipReading whole = read_zip_as_zipfile(file), alone = read_zip_as_zipfile(part);
    if (!whole.ok() || !alone.ok() || whole.members.size() != alone.members.size()) return false;
    uint64_t at = static_cast<uint64_t>(part.data - file.data);
    if (whole.cd_offset != alone.cd_offset + at) return false;  // where each reader found the directory
    for (size_t i = 0; i < whole.members.size(); ++i) {
        const ZipMember &a = whole.members[i], &b = alone.members[i];
        if (a.raw_name != b.raw_name || a.local != b.local + at || a.comp != b.comp || a.size != b.size || a.method != b.method) return false;
    }
    return true;
}

}  // namespace ckpt
