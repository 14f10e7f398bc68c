#include "ckpt/scan.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <ostream>
#include <unordered_set>

#include "checkpoint_builder.hpp"
#include "ckpt/bytes.hpp"
#include "ckpt/error.hpp"
#include "ckpt/mapped_file.hpp"
#include "ckpt/pickle.hpp"
#include "ckpt/report.hpp"
#include "ckpt/safetensors.hpp"
#include "ckpt/value.hpp"
#include "ckpt/zip.hpp"
#include "torch_hooks.hpp"

namespace ckpt {

size_t ScanReport::dangerous() const {
    return static_cast<size_t>(std::count_if(findings.begin(), findings.end(), [](const ScanFinding& f) { return f.severity == GlobalClass::dangerous; }));
}
size_t ScanReport::unknown() const {
    return static_cast<size_t>(std::count_if(findings.begin(), findings.end(), [](const ScanFinding& f) { return f.severity == GlobalClass::unknown; }));
}

namespace {

constexpr int k_max_nesting = 4;

bool looks_like_pickle(ByteView b) { return b.size >= 3 && b.data[0] == 0x80 && b.data[1] >= 2 && b.data[1] <= 5; }

// The torch hooks (storages, tensors, _codecs.encode bytes, the globals table), but a scan never
// stops at what is malformed for torch: such a value stays an opaque object and the scan goes on.
class ScanHooks : public TorchHooks {
public:
    using TorchHooks::TorchHooks;
    Value* reduce(Value* made) override {
        try {
            return TorchHooks::reduce(made);
        } catch (const Error&) {
            return nullptr;
        }
    }
    Value* persistent_load(Value* pid, uint64_t offset) override {
        try {
            return TorchHooks::persistent_load(pid, offset);
        } catch (const Error&) {
            return pid;
        }
    }
};

// One opcode's length (opcode and argument), for the linear pass; 0 for an opcode no protocol has.
uint64_t opcode_length(ByteView pk, uint64_t pos) {
    ByteReader in(pk, "pickle");
    in.seek(pos + 1);
    auto sized = [&](uint64_t n) { in.bytes(n); return in.pos() - pos; };
    switch (pk.data[pos]) {
        case '(': case '.': case '0': case '2': case '1': case 'N': case ')': case ']': case '}': case 'a':
        case 'e': case 'b': case 'd': case 'l': case 'o': case 'R': case 's': case 'u': case 't': case 0x85:
        case 0x86: case 0x87: case 0x88: case 0x89: case 'Q': case 0x81: case 0x92: case 0x8f: case 0x90:
        case 0x91: case 0x93: case 0x94: case 0x97: case 0x98:
            return 1;
        case 'K': case 'q': case 'h': case 0x82: case 0x80: return sized(1);
        case 'M': case 0x83: return sized(2);
        case 'J': case 'r': case 'j': case 0x84: return sized(4);
        case 'G': case 0x95: return sized(8);
        case 'I': case 'L': case 'F': case 'S': case 'V': case 'P': case 'p': case 'g': in.line(); return in.pos() - pos;
        case 'c': case 'i': in.line(); in.line(); return in.pos() - pos;
        case 'U': case 'C': case 0x8c: case 0x8a: return sized(in.u8());
        case 'T': case 'X': case 'B': return sized(in.u32le());
        case 0x8b: { int32_t n = in.i32le(); if (n < 0) return 0; return sized(static_cast<uint64_t>(n)); }
        case 0x8d: case 0x8e: case 0x96: return sized(in.u64le());
        default: return 0;
    }
}

class Scanner {
public:
    explicit Scanner(ScanReport& r) : m_r(r) {}

    // Scans the pickle at the start of `data` (file offset `base`); returns its length (0 if the VM
    // could not finish it).
    uint64_t pickle(ByteView data, uint64_t base, const std::string& record, int depth = 0) {
        m_r.pickles.push_back({record, base, 0, 0});
        size_t at = m_r.pickles.size() - 1;
        std::unordered_set<std::string> named;  // globals the VM resolved, by name
        ValueArena arena;
        std::vector<StorageInfo> storages;
        std::vector<TensorInfo> tensors;
        std::vector<GlobalRef> globals;
        std::vector<Problem> problems;
        ScanHooks hooks(arena, storages, tensors, globals, problems, record);
        uint64_t end = 0;
        const Value* root = nullptr;
        try {
            PickleResult res = run_pickle(data, arena, hooks, record, base);
            end = res.end;
            root = res.root;
            m_r.pickles[at].protocol = res.protocol;
        } catch (const Error& e) {
            finding("unreadable_pickle", GlobalClass::unknown, "", record, e.offset().value_or(base),
                    "the pickle cannot be read to its end (" + e.message() + "): what follows is seen only by the disassembly");
        }
        for (const GlobalRef& g : globals) {
            std::string name = g.module + "." + g.name;
            named.insert(name);
            add_global(name, g.cls, record, g.first_offset, g.count);
        }
        linear(data, base, record, named, end == 0);
        m_r.pickles[at].size = end ? end : data.size;
        if (root && depth < k_max_nesting) nested(root, record, depth);
        return end;
    }

    void finding(const std::string& kind, GlobalClass sev, const std::string& global, const std::string& record, uint64_t offset,
                 const std::string& message) {
        m_r.findings.push_back({kind, sev, global, record, offset, message});
    }

private:
    void add_global(const std::string& name, GlobalClass cls, const std::string& record, uint64_t offset, uint64_t count) {
        m_r.globals.push_back({name, cls, record, offset, count});
        if (cls == GlobalClass::dangerous)
            finding("global", cls, name, record, offset, name + " would run code or reach the system if unpickled");
        else if (cls == GlobalClass::unknown)
            finding("global", cls, name, record, offset, name + " is on no allow-list (torch.load(weights_only=True) refuses it)");
    }

    // Every opcode in order, without running any: GLOBAL and INST names the VM did not reach,
    // extension codes, and (when the VM stopped early) STACK_GLOBALs whose name is unknown.
    void linear(ByteView pk, uint64_t base, const std::string& record, const std::unordered_set<std::string>& named, bool vm_failed) {
        std::map<std::string, std::pair<uint64_t, uint64_t>> extra;  // name → first offset, count
        uint64_t pos = 0;
        while (pos < pk.size) {
            uint8_t op = pk.data[pos];
            uint64_t len = 0;
            try {
                len = opcode_length(pk, pos);
            } catch (const Error&) {
                len = 0;
            }
            if (len == 0) break;
            if (op == 'c' || op == 'i') {
                ByteReader in(pk, "pickle");
                in.seek(pos + 1);
                std::string module(in.line()), name(in.line());
                std::string full = module + "." + name;
                if (!named.count(full) && !(module == "__builtin__" && named.count("builtins." + name))) {
                    auto [it, fresh] = extra.emplace(full, std::make_pair(base + pos, 0));
                    ++it->second.second;
                }
            } else if (op == 0x82 || op == 0x83 || op == 0x84) {
                finding("extension_code", GlobalClass::dangerous, "", record, base + pos,
                        "an extension code (EXT): the unpickler imports whatever copyreg's registry maps it to");
            } else if (op == 0x93 && vm_failed) {
                finding("computed_global", GlobalClass::unknown, "", record, base + pos,
                        "a STACK_GLOBAL the pickle reaches only past where it could be read: its name is not known");
            }
            if (op == '.') break;
            pos += len;
        }
        for (const auto& [full, seen] : extra) {
            size_t dot = full.find('.');
            std::string module = full.substr(0, dot), name = full.substr(dot + 1);
            if (module == "__builtin__") module = "builtins";
            add_global(module + "." + name, classify_global(module, name), record, seen.first, seen.second);
        }
    }

    // bytes values that are pickles themselves (a payload to be loaded by whatever code unpickles
    // the outer object).
    void nested(const Value* root, const std::string& record, int depth) {
        std::vector<const Value*> todo{root};
        std::unordered_set<const Value*> seen;
        while (!todo.empty()) {
            const Value* v = todo.back();
            todo.pop_back();
            if (!v || !seen.insert(v).second) continue;
            if ((v->kind == ValueKind::bytes || v->kind == ValueKind::bytearray) &&
                looks_like_pickle({reinterpret_cast<const uint8_t*>(v->s.data()), v->s.size()})) {
                ByteView inner{reinterpret_cast<const uint8_t*>(v->s.data()), v->s.size()};
                std::string where = record + " > bytes at " + std::to_string(v->offset);
                finding("nested_pickle", GlobalClass::unknown, "", where, v->offset, "a bytes value that is itself a pickle (scanned as well)");
                pickle(inner, v->offset, where, depth + 1);
            }
            for (const Value* x : v->items) todo.push_back(x);
            for (const Value* x : v->entries) todo.push_back(x);
            todo.push_back(v->state);
            todo.push_back(v->args);
            todo.push_back(v->callable);
        }
    }

    ScanReport& m_r;
};

// A zip end record in the last 64 KiB + 22 bytes: the file is (also) a zip to readers that look there.
bool has_zip_end(ByteView f) {
    if (f.size < 22) return false;
    uint64_t lo = f.size > 65557 ? f.size - 65557 : 0;
    for (uint64_t p = f.size - 22 + 1; p-- > lo;)
        if (f.data[p] == 'P' && f.data[p + 1] == 'K' && f.data[p + 2] == 5 && f.data[p + 3] == 6) return true;
    return false;
}

void scan_zip(Scanner& s, ScanReport& r, ByteView zipbytes, uint64_t base) {
    ZipArchive zip = ZipArchive::open(zipbytes);
    uint64_t first = UINT64_MAX;
    bool torchscript = false;
    for (const ZipEntry& e : zip.entries()) {
        first = std::min(first, e.local_header_offset);
        if (e.name.find("/code/") != std::string::npos || (e.name.size() >= 13 && e.name.compare(e.name.size() - 13, 13, "constants.pkl") == 0))
            torchscript = true;
    }
    r.format = torchscript ? "torchscript" : "torch-zip";
    if (first != UINT64_MAX && first > 0)
        s.finding("polyglot", GlobalClass::unknown, "", "", base, std::to_string(first) + " bytes before the first local header the zip directory names");
    for (const ZipEntry& e : zip.entries()) {
        bool pkl = e.name.size() >= 4 && e.name.compare(e.name.size() - 4, 4, ".pkl") == 0;
        size_t slash = e.name.find('/');
        bool storage = slash != std::string::npos && e.name.compare(slash, 6, "/data/") == 0 && e.name.find('/', slash + 6) == std::string::npos;
        if (!pkl && storage) continue;
        RecordData d = zip.record_data(e);
        if (!pkl && !looks_like_pickle(d.view())) continue;
        s.pickle(d.view(), base + (e.method == 0 ? zip.data_offset(e) : 0), e.name);
    }
}

}  // namespace

ScanReport scan_file(const std::string& path) {
    ScanReport r;
    r.file = path;
    try {
        MappedFile file(path);
        ByteView f = file.view();
        Scanner s(r);
        if (f.size == 0) throw Error(ErrorKind::format, "", "empty file (0 bytes): nothing to scan");
        if (ZipArchive::sniff(f)) {
            scan_zip(s, r, f, 0);
        } else if (sniff_safetensors(f)) {
            read_safetensors(f);  // the header is checked; there is no pickle
            r.format = "safetensors";
        } else if (looks_like_pickle(f) || f.data[0] == '(' || f.data[0] == 'c' || f.data[0] == '}' || f.data[0] == ']') {
            // torch.load of a file that is not a zip unpickles from its first byte.
            bool legacy = sniff_legacy(f);
            r.format = legacy ? "legacy" : "pickle";
            uint64_t at = 0;
            for (int n = 0; n < (legacy ? 5 : 1) && at < f.size; ++n) {
                std::string record = legacy ? "pickle " + std::to_string(n + 1) + " of 5" : "pickle";
                uint64_t used = s.pickle(*f.sub(at, f.size - at), at, record);
                if (used == 0) break;
                at += used;
            }
            if (has_zip_end(f)) {
                s.finding("polyglot", GlobalClass::dangerous, "", "", 0,
                          "a pickle with a zip behind it: torch.load runs the pickle, a zip-reading scanner sees only the zip");
                const uint8_t sig[] = {'P', 'K', 3, 4};
                const uint8_t* z = std::search(f.data, f.data + f.size, sig, sig + 4);
                if (z != f.data + f.size) {
                    uint64_t off = static_cast<uint64_t>(z - f.data);
                    try {
                        scan_zip(s, r, *f.sub(off, f.size - off), off);
                        r.format = "pickle+zip";
                    } catch (const Error&) {
                        // offsets relative to the whole file, or not a zip after all: the finding stands
                    }
                }
            }
        } else {
            throw Error(ErrorKind::format, "", "not a checkpoint or pickle (no zip, pickle, legacy or safetensors start)");
        }
    } catch (const Error& e) {
        if (e.path().empty()) throw e.with_path(path);
        throw;
    }
    return r;
}

nlohmann::json to_json(const std::vector<ScanReport>& reports, bool strict) {
    nlohmann::json j;
    j["schema_version"] = k_schema_version;
    j["tool"] = tool_json();
    j["command"] = "scan";
    j["strict"] = strict;
    nlohmann::json files = nlohmann::json::array();
    size_t dangerous = 0, unknown = 0;
    for (const ScanReport& r : reports) {
        nlohmann::json f;
        f["file"] = r.file;
        f["format"] = r.format;
        nlohmann::json pk = nlohmann::json::array();
        for (const auto& p : r.pickles) pk.push_back({{"record", p.record}, {"offset", p.offset}, {"bytes", p.size}, {"protocol", p.protocol}});
        f["pickles"] = std::move(pk);
        nlohmann::json gl = nlohmann::json::array();
        for (const auto& g : r.globals)
            gl.push_back({{"global", g.global}, {"class", global_class_name(g.cls)}, {"record", g.record}, {"offset", g.offset}, {"count", g.count}});
        f["globals"] = std::move(gl);
        nlohmann::json fd = nlohmann::json::array();
        for (const auto& x : r.findings) {
            nlohmann::json o = {{"kind", x.kind}, {"severity", global_class_name(x.severity)}, {"record", x.record}, {"offset", x.offset}, {"message", x.message}};
            o["global"] = x.global.empty() ? nlohmann::json() : nlohmann::json(x.global);
            fd.push_back(std::move(o));
        }
        f["findings"] = std::move(fd);
        f["dangerous"] = r.dangerous();
        f["unknown"] = r.unknown();
        dangerous += r.dangerous();
        unknown += r.unknown();
        files.push_back(std::move(f));
    }
    j["files"] = std::move(files);
    j["dangerous"] = dangerous;
    j["unknown"] = unknown;
    return j;
}

void render_text(const ScanReport& r, std::ostream& out, const TextStyle& style) {
    Paint paint{style.color};
    size_t d = r.dangerous(), u = r.unknown();
    out << paint("1", r.file) << " (" << r.format << ", " << r.pickles.size() << " pickle" << (r.pickles.size() == 1 ? "" : "s") << ", "
        << r.globals.size() << " globals): ";
    if (!d && !u) out << paint("32", "nothing dangerous or unknown") << "\n";
    else out << (d ? paint("31", std::to_string(d) + " dangerous") : "0 dangerous") << ", " << u << " unknown\n";
    for (const auto& f : r.findings) {
        out << "  " << (f.severity == GlobalClass::dangerous ? paint("31", "dangerous") : paint("33", "unknown  ")) << "  "
            << (f.global.empty() ? f.kind : f.global);
        if (!f.record.empty()) out << "  (" << f.record << ", byte " << f.offset << ")";
        if (f.kind != "global") out << ": " << f.message;
        out << "\n";
    }
}

std::vector<Annotation> github_annotations(const ScanReport& r, bool strict) {
    std::vector<Annotation> out;
    for (const auto& f : r.findings) {
        bool dangerous = f.severity == GlobalClass::dangerous;
        std::string kind = f.kind;
        std::replace(kind.begin(), kind.end(), '_', ' ');
        std::string message = f.message;  // a global's names it first: "os.system would run code …"
        if (!f.record.empty()) message += " (" + f.record + ", byte " + std::to_string(f.offset) + ")";
        out.push_back({dangerous || strict ? "error" : "warning", r.file,
                       std::string("scan: ") + (dangerous ? "dangerous " : "unknown ") + kind, message});
    }
    return out;
}

}  // namespace ckpt

