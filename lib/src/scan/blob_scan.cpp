#include "scan/blob_scan.hpp"

#include <string.h>

#include <cstring>

#include <algorithm>
#include <cctype>
#include <deque>
#include <memory>
#include <set>
#include <unordered_set>

#include "base/text_util.hpp"
#include "ckpt/dtype.hpp"
#include "ckpt/error.hpp"
#include "formats/format.hpp"
#include "formats/safetensors.hpp"
#include "io/decompress.hpp"
#include "pickle/pickle_ops.hpp"
#include "scan/npy_header.hpp"
#include "scan/tar_reading.hpp"
#include "scan/torchscript_code.hpp"
#include "scan/zip_readings.hpp"

namespace ckpt {

namespace ops = pickle_ops;
using text::ends_with;
using text::starts_with;

namespace {

// What all decompression of one file may produce, and the largest member inflated to be scanned.
constexpr uint64_t k_inflate_budget = 1ull << 30;
// How far past junk after a pickle the scan looks for another one.
constexpr uint64_t k_resync_window = 64 << 10;

bool starts(ByteView b, std::string_view magic) {
    return b.size >= magic.size() && std::equal(magic.begin(), magic.end(), reinterpret_cast<const char*>(b.data));
}
bool zip_local_start(ByteView b) { return starts(b, std::string_view("PK\x03\x04", 4)); }
bool zip_empty_start(ByteView b) { return starts(b, std::string_view("PK\x05\x06", 4)); }
bool npy_start(ByteView b) { return starts(b, "\x93NUMPY"); }
// pickle.load takes any opcode as the first (no PROTO needed, any protocol).
bool opcode_start(ByteView b) { return b.size >= 1 && ops::info(b.data[0]) != nullptr; }
// A member or bytes past junk that look like a pickle: PROTO, or the opcodes a protocol 0 or 1
// pickle starts with (a MARK, a GLOBAL, an empty container, a scalar).
bool pickle_like_start(ByteView b) {
    static constexpr std::string_view k_starts = "(c})]NIJKMLSTUVXFG";
    return ops::proto_start(b, 0) || (b.size >= 2 && k_starts.find(static_cast<char>(b.data[0])) != std::string_view::npos);
}

ByteView tail(ByteView b, uint64_t from) { return {b.data + from, b.size - from}; }
ByteView part(ByteView b, uint64_t from, uint64_t n) { return {b.data + from, std::min(n, b.size - from)}; }

// A zip end record in the last 64 KiB + 22 bytes: readers that look for the end see a zip.
bool has_zip_end(ByteView f) {
    if (f.size < 22) return false;
    uint64_t lo = f.size > 65557 ? f.size - 65557 : 0;
    for (uint64_t p = f.size - 22 + 1; p-- > lo;)
        if (f.data[p] == 'P' && f.data[p + 1] == 'K' && f.data[p + 2] == 5 && f.data[p + 3] == 6) return true;
    return false;
}

// A TorchScript source as torch.jit.load finds it: ROOT/code/…/X.py, looked up with ASCII case folded
// (miniz's lookup), so `Code/` and `.PY` are code too.
bool code_member(std::string_view name, std::string_view root) {
    std::string folded(name), want = std::string(root) + "/code/";
    for (char& c : folded) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (char& c : want) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return starts_with(folded, want) && ends_with(folded, ".py");
}

std::string join(const std::vector<std::string>& v, const char* sep) {
    std::string out;
    for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
    return out;
}

// Walks what torch.save's data.pkl built for `*_extra_state` keys that hold a tensor of a typed storage
// (torch._utils._rebuild_tensor_v2(('storage', cls, key, location, numel), offset, size, stride, …),
// perhaps inside _rebuild_parameter).
std::vector<ExtraState> extra_states(const Value* root) {
    std::vector<ExtraState> out;
    std::vector<const Value*> work{root};
    std::unordered_set<const Value*> seen{root};
    seen.reserve(1024);
    auto callee = [](const Value* v) -> std::string_view {
        const Value* c = v ? v->callable() : nullptr;
        return c && c->kind == ValueKind::global && c->s() == "torch._utils" ? c->s2 : std::string_view();
    };
    while (!work.empty() && seen.size() < (1u << 22)) {
        const Value* v = work.back();
        work.pop_back();
        ValueSpan e = v->entries();
        for (size_t i = 0; i + 1 < e.size(); i += 2) {
            const Value* t = e[i + 1];
            if (e[i]->kind != ValueKind::string || !ends_with(e[i]->s(), "_extra_state")) continue;
            if (callee(t) == "_rebuild_parameter" && t->args() && !t->args()->items().empty()) t = t->args()->items()[0];
            std::string_view fn = callee(t);
            ValueSpan a = t->args() ? t->args()->items() : ValueSpan();
            if ((fn != "_rebuild_tensor_v2" && fn != "_rebuild_tensor") || a.size() < 3 || a[0]->kind != ValueKind::tuple ||
                a[1]->kind != ValueKind::integer || a[2]->kind != ValueKind::tuple)
                continue;
            ValueSpan pid = a[0]->items();
            if (pid.size() < 3 || pid[1]->kind != ValueKind::global || pid[2]->kind != ValueKind::string) continue;
            auto dt = dtype_from_storage_class(pid[1]->s2);
            if (!dt) continue;
            uint64_t numel = 1;
            bool ok = a[1]->i() >= 0;
            for (const Value* d : a[2]->items()) {
                auto m = d->kind == ValueKind::integer && d->i() >= 0 ? checked_mul(numel, static_cast<uint64_t>(d->i())) : std::nullopt;
                ok &= m.has_value();
                numel = m.value_or(0);
            }
            auto bytes = checked_mul(numel, dtype_size(*dt));
            auto off = checked_mul(static_cast<uint64_t>(a[1]->i()), dtype_size(*dt));
            if (ok && bytes && off && *bytes) out.push_back({std::string(e[i]->s()), std::string(pid[2]->s()), *off, *bytes});
        }
        auto visit = [&](const Value* c) {
            if (c && seen.insert(c).second) work.push_back(c);
        };
        for (const Value* c : v->items()) visit(c);
        for (const Value* c : e) visit(c);
        visit(v->args());
        visit(v->state);
    }
    return out;
}

}  // namespace

BlobScanner::BlobScanner(ScanReport& report, const GlobalPolicy& policy)
    : m_r(report), m_pickles(report, policy), m_inflate_budget(k_inflate_budget) {
    m_pickles.set_blob_scan([this](ByteView b, uint64_t offset, const std::string& record, bool surely, int depth) {
        scan(b, offset, record, surely, depth);
    });
}

void BlobScanner::finding(std::string kind, GlobalClass severity, const Where& w, uint64_t offset, std::string message) {
    m_pickles.finding({std::move(kind), severity, "", w.name, offset, "", "", std::move(message)});
}

void BlobScanner::scan_file(ByteView file) {
    if (file.size == 0) throw Error(ErrorKind::format, "", "empty file (0 bytes): nothing to scan");
    dispatch(file, {0, true, "", 0}, false, true);
}

void BlobScanner::scan(ByteView bytes, uint64_t offset, const std::string& name, bool surely, int depth) {
    dispatch(bytes, {offset, false, name, depth}, surely, false);
}

void BlobScanner::dispatch(ByteView b, const Where& w, bool surely, bool top) {
    if (w.depth > k_max_scan_depth) {
        finding("opaque_wrapper", GlobalClass::unknown, w, w.base,
                "archives and pickles nested more than " + std::to_string(k_max_scan_depth) +
                    " deep: what lies deeper is not opened, so it is not seen");
        return;
    }
    if (b.size == 0) return;
    if (zip_local_start(b)) scan_zip(b, w, true, top);
    else if (zip_empty_start(b)) scan_zip(b, w, false, top);
    else if (npy_start(b)) {
        scan_npy(b, w, surely);
        // An .npy with a zip at its end: numpy reads the array, zipfile-based readers the zip.
        if (has_zip_end(b)) {
            ZipReading p = read_zip_as_zipfile(b);
            if (p.ok() && !p.members.empty()) {
                finding("polyglot", GlobalClass::dangerous, w, w.base,
                        "one file, several formats: it reads as an .npy (numpy.load) and as a zip read from its end "
                        "(torch.export.load, zipfile-based scanners); each loader runs what its own reading finds (both are scanned)");
                scan_zip(b, w, false, false);
            }
        }
    }
    else scan_other(b, w, surely, top);
}

// --- zips -------------------------------------------------------------------------------------

void BlobScanner::scan_zip(ByteView b, const Where& w, bool torch_takes_it, bool top) {
    ZipReading t;
    if (torch_takes_it) t = read_zip_as_torch(b);
    else t.problem = "it does not start with a local header (torch.load reads it as pickles, and fails)";
    ZipReading p = read_zip_as_zipfile(b);
    if (!t.ok() && !p.ok()) {
        if (torch_takes_it && scan_archive_run(b, w)) return;
        if (top)
            throw Error(ErrorKind::corrupt, "",
                        "a zip that neither torch.load nor Python's zipfile opens (" + t.problem +
                            "): no loader reads it, so nothing in it runs");
        m_pickles.note("parse_error", w.name, w.base, "a zip that no loader opens (" + t.problem + ")");
        return;
    }
    // A .distcp is archives one after another: zipfile reads the last one only, torch.load none (or,
    // when the last archive's directory offset happens to land on an earlier one's, as with two
    // items of one size, that one); torch.distributed.checkpoint reads each by the offsets its
    // .metadata gives. Each is scanned, so no reading is left unscanned.
    if (torch_takes_it && scan_archive_run(b, w)) return;

    const ZipReading& main = t.ok() ? t : p;
    std::string root(torch_root(t));
    auto torch_has = [&](const char* rec) { return t.ok() && torch_find(t, b, root + "/" + rec) != SIZE_MAX; };
    bool torch_archive = torch_has("data.pkl"), torchscript = torch_has("constants.pkl");
    bool npz = !main.members.empty(), export_archive = false;
    for (const ZipMember& m : main.members) {
        npz &= ends_with(m.name, ".npy");
        export_archive |= m.name == "serialized_exported_program.json" || m.name == "archive_format";
    }
    if (top) m_r.format = torchscript ? "torchscript" : torch_archive ? "torch-zip" : export_archive ? "pt2" : npz ? "npz" : "zip";

    // Local headers: of every member but a torch archive's storages (raw bytes no loader unpickles;
    // a 1 GiB checkpoint's 2,000 of them would each fault a page in).
    auto storage_name = [&](std::string_view name) {
        return torch_archive && starts_with(name, root + "/data/") && !ends_with(name, ".pkl");
    };
    for (ZipReading* z : {&t, &p})
        for (ZipMember& m : z->members)
            if (!storage_name(z == &t ? m.raw_name : m.name)) read_local_header(b, *z, m);

    if (t.ok() && !p.ok())
        finding("zip_confusion", GlobalClass::dangerous, w, w.base + t.eocd,
                "torch.load reads this zip, Python's zipfile does not (" + p.problem +
                    "): numpy.load, torch.export.load and every scanner built on zipfile see none of what torch.load runs");
    else if (torch_takes_it && !t.ok())
        m_pickles.note("parse_error", w.name, w.base,
                       "torch.load does not open this zip (" + t.problem + "); numpy.load and torch.export.load read it with Python's zipfile");
    for (const std::string& d : zip_disagreements(t, p, b))
        finding("zip_confusion", GlobalClass::dangerous, w, w.base,
                "the zip reads differently to torch.load and to Python's zipfile (numpy.load, torch.export.load, "
                "scanners): " + d + "; both readings are scanned");

    uint64_t first = UINT64_MAX;
    for (const ZipMember& m : main.members) first = std::min(first, m.local);
    if (first != UINT64_MAX && first > static_cast<uint64_t>(std::max<int64_t>(main.shift, 0)) && torch_takes_it)
        finding("hidden_entry", GlobalClass::unknown, w, w.base,
                std::to_string(first) + " bytes before the first local header the zip directory names: "
                                        "a reader that walks local headers sees another file there");
    if (torchscript && w.depth == 0)
        m_pickles.note("torchscript_code", "", w.base,
                       "a TorchScript archive: torch.jit.load compiles its code/ and runs the __setstate__ methods "
                       "of the objects it restores (torch.load(weights_only=True) of torch <= 2.5.1 did so too)");

    // Every member of both readings once (by where its data is and how much each reader takes).
    std::set<std::tuple<uint64_t, uint64_t, uint16_t>> seen;
    std::unordered_set<std::string_view> readable_names;  // refused members the other reading may hand over
    for (const ZipReading* z : {&t, &p})
        for (const ZipMember& m : z->members)
            if (!m.unreadable.empty()) readable_names.insert(m.name);
    for (auto it = readable_names.begin(); it != readable_names.end();) {
        bool readable = false;
        for (const ZipReading* z : {&t, &p})
            for (const ZipMember& m : z->members) readable |= m.name == *it && m.unreadable.empty();
        it = readable ? std::next(it) : readable_names.erase(it);
    }
    size_t torch_pickle = t.ok() ? torch_find(t, b, root + "/data.pkl") : SIZE_MAX;
    size_t torch_constants = t.ok() ? torch_find(t, b, root + "/constants.pkl") : SIZE_MAX;
    std::vector<TorchScriptSource> code;
    std::deque<std::vector<uint8_t>> code_buffers;  // inflated sources, kept until the analysis below
    struct Job {
        ByteView bytes;
        std::shared_ptr<std::vector<uint8_t>> owned;  // an inflated member's bytes
        Where where;
        bool sure, torch_pickle;
    };
    std::vector<Job> jobs;
    std::vector<uint8_t> owned;
    size_t encrypted_members = 0;
    for (const ZipReading* z : {&t, &p}) {
        bool is_torch = z == &t;
        for (size_t i = 0; i < z->members.size(); ++i) {
            const ZipMember& m = z->members[i];
            std::string name(is_torch ? m.raw_name : m.name);
            ZipMember flagged;  // a member refused for its flags alone, read as a reader that ignores them
            if (!m.unreadable.empty()) {
                if (readable_names.count(m.name)) continue;  // the other reading hands it over
                if (!seen.insert({m.central, 0, 0xffff}).second) continue;
                bool flags_only = m.data && (m.flags & 0x61) && (m.method == 0 || m.method == 8);
                std::string problem;
                if (flags_only) {
                    flagged = m;
                    flagged.unreadable.clear();
                    member_bytes(b, *z, flagged, 64, owned, problem);
                }
                // ZipCrypto puts 12 bytes before the data; AES is method 99; encrypted DEFLATE does not inflate.
                bool encrypted = (m.flags & 0x1) && (!flags_only || (m.method == 0 && m.comp == m.size + 12) ||
                                                       problem.find("broken") != std::string::npos);
                if (encrypted) {
                    ++encrypted_members;
                    finding("opaque_wrapper", GlobalClass::unknown, w, w.base + m.local,
                            "member '" + name + "' is encrypted: what it holds is not seen (torch.load refuses it; "
                            "zipfile asks for a password)");
                    continue;
                }
                if (!flags_only) {
                    m_pickles.note("parse_error", name, w.base + m.local, "member not read: " + m.unreadable);
                    continue;
                }
                m_pickles.note("flagged_member", name, w.base + m.local,
                               "its flags (" + std::to_string(m.flags) + ") say encrypted or patched, so torch.load and zipfile "
                               "refuse it, but its data is plain: read as a zip reader that ignores those flags reads it");
            }
            const ZipMember& mm = m.unreadable.empty() ? m : flagged;
            if (storage_name(name)) continue;  // raw tensor bytes: torch never unpickles them
            std::string problem;
            ByteView bytes = member_bytes(b, *z, mm, k_inflate_budget, owned, problem);
            // The same bytes from both readings are scanned once (they differ where a stored member's
            // sizes disagree, or a DEFLATE stream runs past the size the directory gives).
            if (!seen.insert({mm.data, bytes.size, mm.method}).second) continue;
            if (!problem.empty()) m_pickles.note("parse_error", name, w.base + m.local, "member read in part: " + problem);
            if (torchscript && code_member(name, root)) {
                code.push_back({name, bytes, w.base + (m.method == 0 ? m.data : m.local)});
                if (!owned.empty()) {
                    code_buffers.push_back(std::move(owned));
                    code.back().code = {code_buffers.back().data(), code_buffers.back().size()};
                    owned.clear();
                }
                continue;
            }
            bool sure = ends_with(name, ".pkl") || ends_with(name, ".pickle") ||
                        (is_torch && (i == torch_pickle || i == torch_constants));
            Where mw{m.method == 0 ? w.base + m.data : w.base + m.local, w.in_file && m.method == 0, name, w.depth};
            std::shared_ptr<std::vector<uint8_t>> keep;
            if (!owned.empty()) keep = std::make_shared<std::vector<uint8_t>>(std::move(owned));
            owned.clear();
            jobs.push_back({bytes, std::move(keep), std::move(mw), sure, is_torch && i == torch_pickle});
        }
    }
    // What is read next are a few members (the pickles); the directories of a 100,000-tensor archive
    // go first, unless the pickle names `_extra_state` tensors, whose records are looked up after it.
    static constexpr std::string_view k_extra = "_extra_state";
    auto names_extra = [](ByteView v) { return ::memmem(v.data, v.size, k_extra.data(), k_extra.size()) != nullptr; };
    bool extra = false;
    for (const Job& j : jobs) extra |= j.torch_pickle && names_extra(j.bytes);
    size_t all_members = main.members.size();
    if (!extra) {
        t = ZipReading();
        p = ZipReading();
    }
    for (const Job& j : jobs) {
        if (!j.torch_pickle) {
            scan_member(j.bytes, j.where, j.sure);
            continue;
        }
        std::vector<ExtraState> extras;
        scan_pickles(j.bytes, j.where, false, SIZE_MAX,
                     extra ? PickleScanner::RootVisitor([&](const Value* root) { extras = extra_states(root); }) : PickleScanner::RootVisitor());
        if (!extras.empty()) scan_extra_states(b, t, root, extras, w);
    }
    if (!code.empty()) scan_torchscript(code, m_pickles);
    if (top && encrypted_members && encrypted_members == all_members)
        throw Error(ErrorKind::unsupported, "",
                    "every member of this zip is encrypted: no loader reads it without the password, and scan cannot see into it");
}

// The pickles TransformerEngine keeps in tensors' bytes, read where torch.save put those bytes.
void BlobScanner::scan_extra_states(ByteView b, const ZipReading& t, const std::string& root,
                                    const std::vector<ExtraState>& extras, const Where& w) {
    constexpr uint64_t k_max_extra_state = 64u << 20;
    std::vector<uint8_t> owned;
    for (const ExtraState& x : extras) {
        size_t i = torch_find(t, b, root + "/data/" + x.storage);
        if (i == SIZE_MAX || x.size > k_max_extra_state) continue;
        ZipMember m = t.members[i];
        read_local_header(b, t, m);
        std::string problem;
        ByteView record = member_bytes(b, t, m, k_max_extra_state + x.offset, owned, problem);
        if (x.offset >= record.size) continue;
        ByteView bytes = part(record, x.offset, x.size);
        if (!opcode_start(bytes)) continue;
        Where xw{w.base + (m.method == 0 ? m.data + x.offset : m.local), w.in_file && m.method == 0,
                 x.key + " (a tensor whose bytes TransformerEngine unpickles)", w.depth + 1};
        scan_pickles(bytes, xw, !ops::proto_start(bytes, 0), 1);
    }
}

// Just past the zip that starts at `at`: the first end record after it that makes [at, end) a zip to
// torch.load. A signature inside some record's data does not make a zip, and is passed over.
static uint64_t zip_end(ByteView f, uint64_t at) {
    static const uint8_t sig[] = {'P', 'K', 5, 6};
    for (uint64_t p = at; p + 22 <= f.size; ++p) {
        const uint8_t* hit = std::search(f.data + p, f.data + f.size, sig, sig + 4);
        if (hit + 22 > f.data + f.size) return 0;
        p = static_cast<uint64_t>(hit - f.data);
        uint64_t end = p + 22 + (f.data[p + 20] | (f.data[p + 21] << 8));
        if (end > f.size) continue;
        if (read_zip_as_torch(part(f, at, end - at)).ok()) return end;
    }
    return 0;
}

bool BlobScanner::scan_archive_run(ByteView f, const Where& w) {
    uint64_t at = 0;
    size_t archives = 0;
    std::vector<std::pair<uint64_t, uint64_t>> runs;
    while (at < f.size) {
        uint64_t end = zip_local_start(tail(f, at)) ? zip_end(f, at) : 0;
        if (!end) break;
        runs.emplace_back(at, end);
        at = end;
    }
    if (runs.size() < 2 && !(runs.size() == 1 && at < f.size)) return false;
    if (w.depth == 0) m_r.format = "zip";
    for (auto [from, to] : runs) {
        ++archives;
        scan_zip(part(f, from, to - from), {w.base + from, w.in_file, w.name + (w.name.empty() ? "" : " > ") + "archive " + std::to_string(archives), w.depth + 1}, true, false);
    }
    if (at < f.size)
        finding("hidden_entry", GlobalClass::unknown, w, w.base + at,
                std::to_string(f.size - at) + " bytes after the " + std::to_string(archives) + " archives of the file are no archive: not read");
    m_pickles.note("archive_run", w.name, w.base,
                   std::to_string(archives) + " zip archives one after another (a torch.distributed.checkpoint .distcp), each scanned");
    return true;
}

// --- .npy -------------------------------------------------------------------------------------

void BlobScanner::scan_npy(ByteView b, const Where& w, bool surely) {
    (void)surely;
    if (w.depth == 0 && w.in_file && w.base == 0 && m_r.format.empty()) m_r.format = "npy";
    NpyHeader h = read_npy_header(b);
    std::string name = w.name.empty() ? "array" : w.name;
    if (!h.valid) {
        m_pickles.note("npy_header", name, w.base, h.problem + ": numpy.load refuses it, so nothing in it is unpickled");
        return;
    }
    if (h.objects == NpyHeader::Objects::no) return;
    m_pickles.note("npy_header", name, w.base,
                   "dtype " + h.descr + (h.objects == NpyHeader::Objects::yes ? " holds objects" : " may hold objects") +
                       ": numpy.load(allow_pickle=True) unpickles the data after the header (byte " + std::to_string(h.data) + ")");
    Where dw{w.base + h.data, w.in_file, name + " (object array)", w.depth};
    scan_pickles(tail(b, h.data), dw, h.objects != NpyHeader::Objects::yes, 1);
    // A header whose newline is not where its length says: numpy goes by the length, a reader that
    // goes by the newline finds its data elsewhere, and that is scanned too.
    const uint8_t* nl = std::find(b.data + 10, b.data + std::min<uint64_t>(b.size, h.data + (64 << 10)), '\n');
    uint64_t after = static_cast<uint64_t>(nl - b.data) + 1;
    if (after <= b.size && after != h.data) {
        m_pickles.note("header_mismatch", name, w.base + h.data,
                       "the .npy header says its data starts at byte " + std::to_string(h.data) + ", its newline ends it at byte " +
                           std::to_string(after) + ": the data after the newline is scanned too");
        scan_pickles(tail(b, after), {w.base + after, w.in_file, name + " (object array, after the header's newline)", w.depth}, true, 1);
    }
}

// --- members and nested bytes ----------------------------------------------------------------------

void BlobScanner::scan_member(ByteView bytes, const Where& w, bool sure_pickle) {
    if (bytes.size == 0) return;
    if (zip_local_start(bytes) || zip_empty_start(bytes)) {
        m_pickles.note("nested_archive", w.name, w.base, "a zip inside (read as torch.load and numpy.load read one)");
        dispatch(bytes, {w.base, w.in_file, w.name, w.depth + 1}, false, false);
    } else if (npy_start(bytes)) {
        scan_npy(bytes, w, false);
    } else if (sniff_wrapper(bytes) != Wrapper::none) {
        dispatch(bytes, {w.base, w.in_file, w.name, w.depth + 1}, false, false);
    } else if (sure_pickle || pickle_like_start(bytes)) {
        scan_pickles(bytes, w, !sure_pickle, SIZE_MAX);
    }
}

// --- pickles back to back -----------------------------------------------------------------------

// Every pickle of `data` back to back, as a loader that calls pickle.load until the data ends sees
// them (a legacy torch file: its five, then raw storages). After junk, a pickle is looked for within
// the next 64 KiB.
PickleScanner::Result BlobScanner::scan_pickles(ByteView data, const Where& w, bool tentative, size_t max_pickles,
                                                const PickleScanner::RootVisitor& first_root) {
    PickleScanner::Result total;
    const std::string name = w.name.empty() ? "pickle" : w.name;
    uint64_t at = 0;
    bool after_fault = false;
    for (size_t n = 0; n < max_pickles && at < data.size; ++n) {
        ByteView rest = tail(data, at);
        bool found_after_junk = false;
        if (after_fault || (n > 0 && !opcode_start(rest))) {
            uint64_t limit = std::min<uint64_t>(rest.size, k_resync_window);
            uint64_t next = UINT64_MAX;
            for (uint64_t p = 1; p + 1 < limit; ++p)
                if (ops::proto_start(tail(rest, p))) {
                    next = p;
                    break;
                }
            if (!after_fault || next != UINT64_MAX)
                m_pickles.note("trailing_bytes", name, w.base + at,
                               std::to_string(next == UINT64_MAX ? rest.size : next) + " bytes after pickle " + std::to_string(n) +
                                   (after_fault ? " broke" : "") + " are not a pickle" +
                                   (next == UINT64_MAX ? "" : "; another one follows them (scanned)"));
            if (next == UINT64_MAX) break;
            at += next;
            rest = tail(data, at);
            found_after_junk = true;
        }
        std::string record = max_pickles == 5 ? "pickle " + std::to_string(n + 1) + " of 5"
                             : n == 0       ? name
                                            : name + " (pickle " + std::to_string(n + 1) + ")";
        PickleScanner::Result res = m_pickles.scan(rest, w.base + at, record,
                                                   tentative || found_after_junk || (n > 0 && !ops::proto_start(rest, 0)),
                                                   n == 0 ? first_root : PickleScanner::RootVisitor(), w.depth);
        total.imports += res.imports;
        if (n == 0) total.not_a_pickle = res.not_a_pickle;
        if (res.end == 0) {
            // A loader that calls pickle.load again after a failure reads on; where the legacy format's
            // raw storages follow, nothing does.
            if (res.not_a_pickle || max_pickles != SIZE_MAX) break;
            at += res.fault;
            after_fault = true;
            continue;
        }
        if (n == 0) total.end = res.end;
        after_fault = false;
        at += res.end;
    }
    return total;
}

// --- everything that is no zip and no .npy ---------------------------------------------------------

void BlobScanner::scan_wrapper(ByteView b, const Where& w, Readings& r) {
    Wrapper kind = sniff_wrapper(b);
    std::string what = wrapper_name(kind);
    if (r.format.empty()) r.format = what;
    if (wrapper_opaque(kind)) {
        r.real.push_back("a " + what + " archive");
        finding("opaque_wrapper", GlobalClass::unknown, w, w.base,
                "a " + what + " archive: ckpt-tool does not open it, so what it holds is not seen (no torch, numpy or "
                "joblib loader reads it as it is; unpack it and scan what it holds)");
        return;
    }
    Decompressed d = decompress(kind, b, m_inflate_budget);
    if (d.bytes.empty() && !d.complete && !d.capped) {
        m_pickles.note("parse_error", w.name, w.base, what + " magic, but no " + what + " data: " + d.problem);
        return;
    }
    m_inflate_budget -= std::min<uint64_t>(m_inflate_budget, d.bytes.size());
    r.real.push_back("a " + what + " stream (joblib.load opens it by its magic, as pickle.load(gzip.open(…)) and its kin do)");
    m_pickles.note("wrapper", w.name, w.base,
                   what + ": " + std::to_string(b.size) + " bytes hold " + std::to_string(d.bytes.size()) +
                       " (scanned as what they are; offsets inside are within them)" + (d.problem.empty() ? "" : "; " + d.problem));
    if (d.capped)
        finding("opaque_wrapper", GlobalClass::unknown, w, w.base,
                what + " data scan does not open whole (" + d.problem + "): the rest is not seen");
    std::string name = (w.name.empty() ? std::string() : w.name + " > ") + what;
    dispatch({d.bytes.data(), d.bytes.size()}, {0, false, name, w.depth + 1}, false, false);
}

bool BlobScanner::scan_tar(ByteView b, const Where& w) {
    TarReading t = read_tar(b);
    if (!t.accepted || t.members.empty()) return false;
    auto member_where = [&](const TarMember& m) {
        return Where{w.base + m.data, w.in_file, (w.name.empty() ? "" : w.name + " > ") + m.name, w.depth};
    };
    std::set<size_t> done;
    // torch.load's tar layout: `storages` and `tensors` (a count, then a pickle per item, each
    // followed by raw bytes), and `pickle`.
    for (const char* name : {"storages", "tensors", "pickle"}) {
        size_t i = tar_find(t, name);
        if (i == SIZE_MAX) continue;
        const TarMember* m = &t.members[i];
        if (m->type == '1') {  // a hard link: the data of the member it names, earlier in the archive
            size_t target = SIZE_MAX;
            for (size_t k = 0; k < i; ++k)
                if (t.members[k].name == m->link) target = k;
            if (target == SIZE_MAX || !t.members[target].regular()) {
                finding("tar_link", GlobalClass::dangerous, w, w.base + m->header,
                        std::string("tar member '") + name + "' is a hard link to '" + m->link +
                            "', no file of the archive: torch.load extracts it and reads what the link reaches");
                continue;
            }
            m = &t.members[target];
        } else if (!m->regular()) {
            finding("tar_link", GlobalClass::dangerous, w, w.base + m->header,
                    std::string("tar member '") + name + "' is " +
                        (m->type == '2' ? "a symbolic link to '" + m->link + "'" : std::string("a device, FIFO or directory")) +
                        ": torch.load extracts it to a temporary folder and unpickles whatever file that reaches, outside the archive");
            continue;
        }
        done.insert(static_cast<size_t>(m - t.members.data()));
        ByteView data = part(b, m->data, m->size);
        Where mw = member_where(*m);
        if (std::string_view(name) == "pickle") {
            scan_pickles(data, mw, false, 1);
            continue;
        }
        // A count, then per item a pickle and raw bytes: an int64 count of elements and the bytes
        // (storages: the element size from the pickle's storage class), or an int32 rank, 4 bytes and
        // sizes, strides and offset as int64 (tensors); storages end with one more pickle.
        bool storages = std::string_view(name) == "storages";
        uint64_t at = 0;
        int64_t count = -1;
        auto root_int = [&](int64_t& out) { return [&out](const Value* v) { if (v->kind == ValueKind::integer) out = v->i(); }; };
        PickleScanner::Result res = m_pickles.scan(data, mw.base, mw.name, false, root_int(count), w.depth);
        bool exact = res.end > 0 && count >= 0;
        at = res.end;
        for (int64_t k = 0; exact && k < count && at < data.size; ++k) {
            uint64_t element = 0;
            auto item = [&](const Value* v) {
                ValueSpan it = v->items();
                if (v->kind == ValueKind::tuple && it.size() == 3 && it[2]->kind == ValueKind::global) {
                    // torch reads storage_type.dtype: a storage class's, or a tensor type's (DoubleTensor).
                    std::string type(it[2]->s2);
                    if (ends_with(type, "Tensor")) type = type.substr(0, type.size() - 6) + "Storage";
                    if (auto d = dtype_from_storage_class(type)) element = dtype_size(*d);
                }
            };
            res = m_pickles.scan(tail(data, at), mw.base + at, mw.name + " (item " + std::to_string(k + 1) + ")", false, item, w.depth);
            if (!res.end) {
                exact = false;
                break;
            }
            at += res.end;
            if (storages) {
                if (!element || data.size - at < 8) { exact = false; break; }
                uint64_t n = load_le(data.data + at, 8);
                auto bytes = checked_mul(n, element);
                if (!bytes || *bytes > data.size - at - 8) { exact = false; break; }
                at += 8 + *bytes;
            } else {
                if (data.size - at < 8) { exact = false; break; }
                uint64_t rank = load_le(data.data + at, 4);
                if (rank > 64 || data.size - at < 8 + 16 * rank + 8) { exact = false; break; }
                at += 8 + 16 * rank + 8;
            }
        }
        if (exact && storages && at < data.size) {
            res = m_pickles.scan(tail(data, at), mw.base + at, mw.name + " (views)", false, {}, w.depth);
            at += res.end;
        }
        if (!exact || at < data.size) {
            // Not the layout torch reads, as far as scan can tell: every pickle that can be found in
            // it, as pickle.load would, and every GLOBAL that lies in the rest, where a reading that
            // sizes the raw bytes otherwise than scan would meet it.
            Where rest{mw.base + at, mw.in_file, mw.name + " (from byte " + std::to_string(at) + ")", w.depth};
            scan_pickles(tail(data, at), rest, true, SIZE_MAX);
            scan_global_lines(tail(data, at), rest);
        }
    }
    for (size_t i = 0; i < t.members.size(); ++i)
        if (!done.count(i) && t.members[i].regular()) scan_member(part(b, t.members[i].data, t.members[i].size), member_where(t.members[i]), false);
    m_pickles.note("tar", w.name, w.base,
                   "a tar of " + std::to_string(t.members.size()) + " members: torch.load tries tarfile before anything "
                   "else and unpickles its storages, tensors and pickle" + (t.problem.empty() ? "" : "; the member list ends early: " + t.problem));
    return true;
}

// A tar whose last member is a zip (a .nemo's weights file) read from the file's end is that
// member read as zipfile reads it, which the tar's scan has scanned: one reading, not a second format.
bool BlobScanner::tar_last_member_is_the_zip(ByteView b, const Where& w) {
    TarReading t = read_tar(b);
    if (!t.accepted || !t.problem.empty()) return false;
    const TarMember* last = nullptr;
    for (const TarMember& m : t.members)
        if (m.regular() && m.size && (!last || m.data > last->data)) last = &m;
    if (!last || last->data > b.size || last->size > b.size - last->data) return false;
    if (!zipfile_reads_only(b, part(b, last->data, last->size))) return false;
    m_pickles.note("tar", w.name, w.base,
                   "its last member " + last->name + " is the zip a zipfile-based reader finds from the file's end: that member, scanned as such");
    return true;
}

void BlobScanner::scan_global_lines(ByteView data, const Where& w) {
    size_t tried = 0;
    for (uint64_t p = 1; p + 4 < data.size && tried < 10000; ++p) {
        if (data.data[p] != 'c') continue;
        const uint8_t* nl = static_cast<const uint8_t*>(std::memchr(data.data + p + 1, '\n', std::min<uint64_t>(data.size - p - 1, 256)));
        if (!nl) continue;
        std::string_view module(reinterpret_cast<const char*>(data.data + p + 1), static_cast<size_t>(nl - data.data - p - 1));
        if (!importable_module_name(module)) continue;
        ++tried;
        PickleScanner::Result r = m_pickles.scan(tail(data, p), w.base + p, w.name + " (a GLOBAL at byte " + std::to_string(p) + ")", true, {}, w.depth);
        if (r.end) p += r.end - 1;
    }
}

void BlobScanner::scan_other(ByteView b, const Where& w, bool surely, bool top) {
    Readings r;
    if (sniff_wrapper(b) != Wrapper::none) scan_wrapper(b, w, r);
    if (scan_tar(b, w)) {
        r.real.push_back("a tar (torch.load tries tarfile first)");
        if (r.format.empty()) r.format = "tar";
    }
    bool legacy = sniff_legacy(b);
    bool pickle_read = false;
    if (opcode_start(b)) {
        PickleScanner::Result res = scan_pickles(b, w, !surely && !ops::proto_start(b, 0), legacy ? 5 : SIZE_MAX);
        // A pickle to pickle.load, even one that breaks at once, when it starts as pickles do or
        // got somewhere; other bytes that merely happen to be an opcode (a PNG's 0x89) are none.
        pickle_read = pickle_like_start(b) || res.imports > 0 || res.end > 0;
        if (res.imports > 0)
            r.real.push_back(legacy ? "a legacy torch.save stream (torch.load)" : "a pickle that imports (pickle.load, torch.load, numpy.load, joblib.load)");
        if (pickle_read && r.format.empty()) r.format = legacy ? "legacy" : "pickle";
    }
    bool safetensors = false;
    std::string safetensors_error;
    if (sniff_safetensors(b)) {
        try {
            read_safetensors(b);
            safetensors = true;
            r.real.push_back("a safetensors file");
            if (r.format.empty()) r.format = "safetensors";
        } catch (const Error& e) {
            safetensors_error = e.message();
        }
    }
    if (has_zip_end(b) && !tar_last_member_is_the_zip(b, w)) {
        // No local header first, so torch.load does not take it as a zip; zipfile finds its end.
        ZipReading p = read_zip_as_zipfile(b);
        if (p.ok() && !p.members.empty()) {
            r.real.push_back("a zip read from its end (torch.export.load, zipfile-based scanners)");
            std::string fmt = r.format;
            scan_zip(b, w, false, false);
            if (r.format.empty()) r.format = "zip";
            else if (fmt == "pickle" || fmt == "legacy") r.format = "pickle+zip";
        }
    }
    if (r.real.size() >= 2)
        finding("polyglot", GlobalClass::dangerous, w, w.base,
                "one file, several formats: it reads as " + join(r.real, ", as ") +
                    "; each loader runs what its own reading finds (every reading is scanned)");
    if (top) m_r.format = r.format;
    if (r.format.empty() && !pickle_read && !safetensors) {
        if (!top) return;
        if (!safetensors_error.empty()) throw Error(ErrorKind::corrupt, "", safetensors_error);
        throw Error(ErrorKind::format, "",
                    "not a checkpoint or pickle: no loader reads it (no zip, tar, pickle opcode, .npy, safetensors header "
                    "or compressed stream at its start)");
    }
}

}  // namespace ckpt
