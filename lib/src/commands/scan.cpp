// `scan` at the level of a file: which pickles it holds and where (pickle_scan.cpp judges each).
#include "ckpt/scan.hpp"

#include "base/text_util.hpp"

#include <algorithm>
#include <optional>

#include "formats/format.hpp"
#include "ckpt/bytes.hpp"
#include "ckpt/checkpoint.hpp"
#include "ckpt/error.hpp"
#include "io/mapped_file.hpp"
#include "formats/safetensors.hpp"
#include "io/zip.hpp"
#include "pickle/pickle_ops.hpp"
#include "commands/pickle_scan.hpp"

namespace ckpt {

size_t ScanReport::dangerous() const {
    return static_cast<size_t>(std::count_if(findings.begin(), findings.end(),
                                             [](const ScanFinding& f) { return f.severity == GlobalClass::dangerous; }));
}
size_t ScanReport::unknown() const { return findings.size() - dangerous(); }

namespace {

namespace ops = pickle_ops;

// How far past junk after a pickle the scan looks for another one.
constexpr uint64_t k_resync_window = 64 << 10;

// A file or member that opens with PROTO of any protocol.
bool proto_start(ByteView b) { return ops::proto_start(b, 0); }

// The first opcodes of a protocol 0 or 1 pickle, which has no PROTO: a MARK, a GLOBAL, an empty
// container, a scalar. (torch.load unpickles any file that is not a zip from its first byte.)
bool old_protocol_start(ByteView b) {
    static constexpr std::string_view k_starts = "(c})]NIJKMLSTUVXFG";
    return b.size >= 2 && k_starts.find(static_cast<char>(b.data[0])) != std::string_view::npos;
}
bool pickle_start(ByteView b) { return proto_start(b) || old_protocol_start(b); }

bool npy_start(ByteView b) { return b.size >= 10 && std::string_view(reinterpret_cast<const char*>(b.data), 6) == "\x93NUMPY"; }

using text::ends_with;

ByteView tail(ByteView b, uint64_t from) { return {b.data + from, b.size - from}; }

// Every pickle of `data` back to back, as a loader that calls pickle.load until the data ends sees
// them (a legacy torch file: its five, then raw storages). After junk, a pickle is looked for within
// the next 64 KiB.
void scan_stacked(PickleScanner& s, ByteView data, uint64_t base, const std::string& name, bool tentative,
                  size_t max_pickles = SIZE_MAX) {
    uint64_t at = 0;
    bool after_fault = false;
    for (size_t n = 0; n < max_pickles && at < data.size; ++n) {
        ByteView rest = tail(data, at);
        bool found_after_junk = false;
        if (after_fault || (n > 0 && !pickle_start(rest))) {
            uint64_t limit = std::min<uint64_t>(rest.size, k_resync_window);
            uint64_t next = UINT64_MAX;
            for (uint64_t p = 1; p + 1 < limit; ++p)
                if (ops::proto_start(tail(rest, p))) {
                    next = p;
                    break;
                }
            if (!after_fault || next != UINT64_MAX)
                s.note("trailing_bytes", name, base + at,
                       std::to_string(next == UINT64_MAX ? rest.size : next) + " bytes after pickle " + std::to_string(n) +
                           (after_fault ? " broke" : "") + " are not a pickle" +
                           (next == UINT64_MAX ? "" : "; another one follows them (scanned)"));
            if (next == UINT64_MAX) return;
            at += next;
            rest = tail(data, at);
            found_after_junk = true;
        }
        std::string record = max_pickles == 5 ? "pickle " + std::to_string(n + 1) + " of 5"
                             : n == 0       ? name
                                            : name + " (pickle " + std::to_string(n + 1) + ")";
        PickleScanner::Result res = s.scan(rest, base + at, record, tentative || found_after_junk || !proto_start(rest));
        if (res.end == 0) {
            // A loader that calls pickle.load again after a failure reads on; where the legacy format's
            // raw storages follow, nothing does.
            if (res.not_a_pickle || max_pickles != SIZE_MAX) return;
            at += res.fault;
            after_fault = true;
            continue;
        }
        after_fault = false;
        at += res.end;
    }
}

// .npy: magic, version, a header (a Python dict literal) and the data, which for an object dtype is a
// pickle (numpy.save pickles the array; numpy.load unpickles it with allow_pickle=True).
//   0 "\x93NUMPY"  6 u8 major  7 u8 minor  8 u16 (v1) or u32 (v2, v3) header length  then the header
void scan_npy(PickleScanner& s, ByteView b, uint64_t base, const std::string& record) {
    uint64_t len_size = b.data[6] >= 2 ? 4 : 2;
    uint64_t header_len = b.data[8] | (b.data[9] << 8);
    if (len_size == 4) {
        if (b.size < 12) return s.note("not_a_pickle", record, base, "an .npy header cut short");
        header_len |= (static_cast<uint64_t>(b.data[10]) << 16) | (static_cast<uint64_t>(b.data[11]) << 24);
    }
    uint64_t start = 8 + len_size + header_len;
    if (start > b.size) return s.note("not_a_pickle", record, base, "an .npy header longer than the file");
    std::string_view header(reinterpret_cast<const char*>(b.data + 8 + len_size), header_len);
    // An object dtype: 'O', '|O', '<O8' … alone or as a field of a structured dtype.
    bool object = false;
    for (size_t q = header.find('\''); q != std::string_view::npos; q = header.find('\'', q + 1)) {
        size_t e = header.find('\'', q + 1);
        if (e == std::string_view::npos) break;
        std::string_view tok = header.substr(q + 1, e - q - 1);
        if (!tok.empty() && (tok[0] == '|' || tok[0] == '<' || tok[0] == '>' || tok[0] == '=')) tok.remove_prefix(1);
        if (tok == "O" || tok == "O8" || tok == "O4") object = true;
        q = e;
    }
    ByteView data = tail(b, start);
    if (object) s.scan(data, base + start, record + " (object array)", false);
    else if (proto_start(data)) s.scan(data, base + start, record + " (data that starts like a pickle)", true);
    // A header length that disagrees with where the header's newline is: a reader that goes by the
    // newline finds its data elsewhere, and that is scanned too.
    const uint8_t* nl = std::find(b.data + 8 + len_size, b.data + std::min<uint64_t>(b.size, 8 + len_size + (64 << 10)), '\n');
    uint64_t after = static_cast<uint64_t>(nl - b.data) + 1;
    if (object && after <= b.size && after != start) {
        s.note("header_mismatch", record, base + start,
               "the .npy header says " + std::to_string(header_len) + " bytes, its newline ends it at byte " +
                   std::to_string(after) + ": the data after the newline is scanned too");
        s.scan(tail(b, after), base + after, record + " (object array, after the header's newline)", true);
    }
}

// A member torch's reader takes as a tensor's raw bytes: a file of a folder named data, next to the
// data.pkl that references it (archive/data/0, data/0 …). torch never unpickles those.
bool storage_record(std::string_view name) {
    if (ends_with(name, ".pkl")) return false;
    size_t slash = name.rfind('/');
    if (slash == std::string_view::npos) return false;
    std::string_view dir = name.substr(0, slash);
    return dir == "data" || ends_with(dir, "/data");
}

void scan_zip(PickleScanner& s, ScanReport& r, ByteView bytes, uint64_t base) {
    ZipLimits limits;
    limits.tolerant = true;
    ZipArchive zip = ZipArchive::open(bytes, limits);
    uint64_t first = UINT64_MAX;
    bool torchscript = false, torch = false, npz = !zip.entries().empty();
    for (const ZipEntry& e : zip.entries()) {
        first = std::min(first, e.local_header_offset);
        torchscript |= e.name.find("/code/") != std::string::npos || ends_with(e.name, "constants.pkl");
        torch |= ends_with(e.name, "data.pkl");
        npz &= ends_with(e.name, ".npy");
    }
    r.format = torchscript ? "torchscript" : torch ? "torch-zip" : npz ? "npz" : "zip";
    if (torchscript)
        s.note("torchscript_code", "", base,
               "a TorchScript archive: torch.jit.load compiles the code/ it holds and runs its __setstate__ "
               "methods; scan judges the archive's pickles, not that TorchScript code");
    if (first != UINT64_MAX && first > 0)
        s.finding({"hidden_entry", GlobalClass::unknown, "", "", base, "", "",
                   std::to_string(first) + " bytes before the first local header the zip directory names: "
                                           "a reader that walks local headers sees another file there"});
    for (const ZipEntry& e : zip.entries()) {
        if (storage_record(e.name) || ends_with(e.name, ".py")) continue;
        const std::string name(e.name);
        if ((e.flags & 1) && (e.method == 99 || (e.method == 0 && e.compressed_size == e.size + 12))) {
            s.note("encrypted_member", name, base + e.local_header_offset,
                   "an encrypted member, not scanned: torch.load cannot read it either");
            continue;
        }
        try {
            RecordData head = zip.record_prefix(e, 16);
            bool pkl = ends_with(e.name, ".pkl") || ends_with(e.name, ".pickle");
            if (!pkl && !npy_start(head.view()) && !pickle_start(head.view())) continue;
            RecordData d = zip.record_data(e);
            uint64_t at = base + (e.method == 0 ? zip.data_offset(e) : 0);
            if (npy_start(d.view())) scan_npy(s, d.view(), at, name);
            else scan_stacked(s, d.view(), at, name, !pkl);
        } catch (const Error& x) {
            s.note("parse_error", name, base + e.local_header_offset, "member not read: " + x.message());
        }
    }
}

// Just past the zip that starts at `at`: the first end-of-central-directory record after it that
// makes [at, end) a zip (a .distcp of torch.distributed.checkpoint is a run of torch.save archives,
// one after another). A signature inside some record's data does not make a zip, and is passed over.
std::optional<uint64_t> zip_end(ByteView f, uint64_t at) {
    static const uint8_t sig[] = {'P', 'K', 5, 6};
    for (uint64_t p = at; p + 22 <= f.size; ++p) {
        const uint8_t* hit = std::search(f.data + p, f.data + f.size, sig, sig + 4);
        if (hit + 22 > f.data + f.size) return std::nullopt;
        p = static_cast<uint64_t>(hit - f.data);
        uint64_t end = p + 22 + (f.data[p + 20] | (f.data[p + 21] << 8));
        if (end > f.size) continue;
        try {
            ZipLimits limits;
            limits.tolerant = true;
            ZipArchive::open(*f.sub(at, end - at), limits);
            return end;
        } catch (const Error&) {
        }
    }
    return std::nullopt;
}

// A file that starts as a zip but is none as a whole: when it is archives one after another, each
// is scanned (and what follows the last, if anything, is a finding). false when not even the first is one.
bool scan_zip_run(PickleScanner& s, ScanReport& r, ByteView f) {
    uint64_t at = 0;
    size_t archives = 0;
    while (at < f.size) {
        std::optional<uint64_t> end = ZipArchive::sniff(*f.sub(at, f.size - at)) ? zip_end(f, at) : std::nullopt;
        if (!end) {
            if (!archives) return false;
            s.finding({"hidden_entry", GlobalClass::unknown, "", "", at, "", "",
                       std::to_string(f.size - at) + " bytes after the " + std::to_string(archives) +
                           " archives of the file are no archive: not read"});
            break;
        }
        scan_zip(s, r, *f.sub(at, *end - at), at);
        ++archives;
        at = *end;
    }
    s.note("archive_run", "", 0,
           std::to_string(archives) + " zip archives one after another (a torch.distributed.checkpoint .distcp), each scanned");
    return true;
}

// A zip end record in the last 64 KiB + 22 bytes: the file is (also) a zip to readers that look there.
bool has_zip_end(ByteView f) {
    if (f.size < 22) return false;
    uint64_t lo = f.size > 65557 ? f.size - 65557 : 0;
    for (uint64_t p = f.size - 22 + 1; p-- > lo;)
        if (f.data[p] == 'P' && f.data[p + 1] == 'K' && f.data[p + 2] == 5 && f.data[p + 3] == 6) return true;
    return false;
}

void scan_pickle_file(PickleScanner& s, ScanReport& r, ByteView f) {
    bool legacy = sniff_legacy(f);
    r.format = legacy ? "legacy" : "pickle";
    scan_stacked(s, f, 0, "pickle", false, legacy ? 5 : SIZE_MAX);
    if (!has_zip_end(f)) return;
    s.finding({"polyglot", GlobalClass::dangerous, "", "", 0, "", "",
               "a pickle with a zip behind it: torch.load runs the pickle, a zip-reading scanner sees only the zip"});
    const uint8_t sig[] = {'P', 'K', 3, 4};
    const uint8_t* z = std::search(f.data, f.data + f.size, sig, sig + 4);
    if (z == f.data + f.size) return;
    uint64_t off = static_cast<uint64_t>(z - f.data);
    try {
        scan_zip(s, r, tail(f, off), off);
        r.format = "pickle+zip";
    } catch (const Error&) {
        // offsets relative to the whole file, or not a zip after all: the finding stands
    }
}

}  // namespace

ScanReport scan_bytes(ByteView f, const std::string& name, const ScanOptions& options) {
    ScanReport r;
    r.file = name;
    PickleScanner s(r, *options.policy);
    if (f.size == 0) throw Error(ErrorKind::format, "", "empty file (0 bytes): nothing to scan");
    if (ZipArchive::sniff(f)) {
        try {
            scan_zip(s, r, f, 0);
        } catch (const Error&) {
            if (!scan_zip_run(s, r, f)) throw;
        }
    } else if (sniff_safetensors(f)) {
        read_safetensors(f);  // the header is checked; there is no pickle
        r.format = "safetensors";
    } else if (npy_start(f)) {
        r.format = "npy";
        scan_npy(s, f, 0, "array");
    } else if (pickle_start(f)) {
        scan_pickle_file(s, r, f);
    } else {
        throw Error(ErrorKind::format, "", "not a checkpoint or pickle (no zip, pickle, legacy, npy or safetensors start)");
    }
    return r;
}

ScanReport scan_file(const std::string& path, const ScanOptions& options) {
    return naming_file(path, [&] {
        MappedFile file(path);
        ScanReport r = scan_bytes(file.view(), path, options);
        if (r.format == "torch-zip" || r.format == "torchscript" || r.format == "legacy") {
            try {  // read as torch.load would read it (its pickle only; nothing is called)
                r.weights_only = weights_only_answers(*Checkpoint::open(path));
            } catch (const Error&) {
                // not readable as a checkpoint: no answer (the findings and notes say what is wrong)
            }
        }
        return r;
    });
}

}  // namespace ckpt
