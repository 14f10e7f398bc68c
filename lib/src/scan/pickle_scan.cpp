#include "scan/pickle_scan.hpp"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "ckpt/error.hpp"
#include "pickle/pickle.hpp"
#include "ckpt/value.hpp"
#include "pickle/pickle_ops.hpp"
#include "pickle/pickle_text.hpp"
#include "scan/scan_hooks.hpp"

namespace ckpt {

namespace ops = pickle_ops;

namespace {

constexpr int k_max_nesting = 4;
// A value graph this much larger by reference than in memory is an expansion ("billion laughs").
constexpr uint64_t k_expansion_references = 100'000'000;

using ops::proto_start;

std::string at_byte(uint64_t offset) { return "byte " + std::to_string(offset); }

// The disassembly: every opcode in order, without running any, read two ways. `linear` is how
// pickle.loads and pickletools read bytes. `file` is how Modules/_pickle.c reads a file object
// without peek() (torch.load's io.BytesIO of data.pkl): a FRAME's bytes are read ahead into a buffer,
// and an argument that runs past the buffer's end is read from the file after it, the rest of the
// buffer dropped. The two agree unless a frame ends inside an opcode, which no pickler writes.
struct Walk {
    struct Op {
        uint64_t pos;   // where the opcode byte is
        uint8_t op;
        uint64_t arg;   // where its argument (the payload of a counted one) starts
        uint64_t end;   // just past it
    };
    bool record = false;  // file mode: keep the byte ranges read, to read the stream again
    std::vector<std::pair<uint64_t, uint64_t>> consumed;  // those ranges, in order
    uint64_t straddle = UINT64_MAX;     // file mode: where a read first ran past a frame
    uint64_t nested_frame = UINT64_MAX; // a FRAME that opens inside another
    uint64_t overrun = UINT64_MAX;      // an opcode that starts inside a frame and ends past it
    uint64_t frame_lo = 0, frame_hi = 0;  // the last FRAME's bytes
    uint64_t frames = 0;
    std::vector<std::pair<uint64_t, uint64_t>> skips;  // bytes a loader reads itself (ScanHooks::inline_ranges)
};

class Reader {
public:
    Reader(ByteView pk, bool file) : m_pk(pk), m_file(file) {}
    uint64_t pos() const { return m_p; }
    // Reads `n` bytes; returns where they start, or UINT64_MAX past the end.
    uint64_t read(uint64_t n, Walk& w, bool take = true) {
        if (m_file && m_p + n > m_be && m_be > m_p) {  // runs past the buffer: the rest is dropped
            w.straddle = std::min(w.straddle, m_p);
            m_p = m_be;
        }
        if (n > m_pk.size - m_p) return UINT64_MAX;
        uint64_t at = m_p;
        m_p += n;
        if (m_p > m_be) m_be = m_p;
        if (take && w.record && n) w.consumed.emplace_back(at, n);
        return at;
    }
    uint64_t line(Walk& w) {
        uint64_t e = find_newline(m_p, m_file && m_be > m_p ? m_be : m_pk.size);
        if (e == UINT64_MAX && m_file && m_be > m_p) {  // a line past the buffer: read anew from the file
            w.straddle = std::min(w.straddle, m_p);
            m_p = m_be;
            e = find_newline(m_p, m_pk.size);
        }
        if (e == UINT64_MAX) return UINT64_MAX;
        return read(e + 1 - m_p, w);
    }
    // FRAME n: the next n bytes are read ahead, then reading goes on from their start.
    // A FRAME longer than what is left faults the C unpickler; the bytes reading goes on past it,
    // so that what lies behind a lying FRAME is still seen.
    bool frame(uint64_t n, Walk& w) {
        if (m_be > m_p) w.nested_frame = std::min(w.nested_frame, m_p);
        if (!m_file && n > m_pk.size - m_p) return true;
        w.frame_lo = m_p;
        w.frame_hi = m_p + std::min<uint64_t>(n, m_pk.size - m_p);
        uint64_t at = read(n, w, false);
        if (at == UINT64_MAX) return false;
        m_p = at;
        return true;
    }
    uint64_t le(uint64_t at, int n) const { return load_le(m_pk.data + at, n); }
    void jump(uint64_t to) { m_p = std::min(to, m_pk.size); }

private:
    uint64_t find_newline(uint64_t from, uint64_t to) const {
        for (uint64_t p = from; p < to; ++p)
            if (m_pk.data[p] == '\n') return p;
        return UINT64_MAX;
    }
    ByteView m_pk;
    bool m_file;
    uint64_t m_p = 0, m_be = 0;  // position; end of the bytes read ahead
};

// Calls on_op(const Walk::Op&) for each opcode read, up to STOP or the first that cannot be read.
template <class OnOp>
void walk(ByteView pk, bool file, Walk& w, OnOp&& on_op) {
    Reader r(pk, file);
    size_t skip = 0;
    while (r.pos() < pk.size) {
        while (skip < w.skips.size() && w.skips[skip].first < r.pos()) ++skip;
        if (skip < w.skips.size() && w.skips[skip].first == r.pos()) r.jump(r.pos() + w.skips[skip++].second);
        uint64_t at = r.read(1, w);
        if (at == UINT64_MAX) break;
        uint8_t op = pk.data[at];
        const ops::Info* info = ops::info(op);
        if (!info) break;
        uint64_t arg = r.pos(), ok = 0;
        auto counted = [&](int width, bool is_signed) {
            uint64_t l = r.read(static_cast<uint64_t>(width), w);
            if (l == UINT64_MAX) return uint64_t(UINT64_MAX);
            uint64_t n = r.le(l, width);
            if (is_signed && (n & 0x80000000u)) return uint64_t(UINT64_MAX);
            uint64_t p = r.read(n, w);
            arg = p;
            return p;
        };
        switch (info->arg) {
            case ops::Arg::none: break;
            case ops::Arg::u1: ok = r.read(1, w); break;
            case ops::Arg::u2: ok = r.read(2, w); break;
            case ops::Arg::u4: ok = r.read(4, w); break;
            case ops::Arg::f8: ok = r.read(8, w); break;
            case ops::Arg::u8: {  // FRAME: its bytes are read ahead; the stream read in file mode leaves it out
                uint64_t l = r.read(8, w);
                ok = l == UINT64_MAX ? l : (r.frame(r.le(l, 8), w) ? l : UINT64_MAX);
                if (w.record && ok != UINT64_MAX && w.consumed.size() >= 2) w.consumed.resize(w.consumed.size() - 2);
                ++w.frames;
                break;
            }
            case ops::Arg::len1: ok = counted(1, false); break;
            case ops::Arg::len4: ok = counted(4, false); break;
            case ops::Arg::slen4: ok = counted(4, true); break;
            case ops::Arg::len8: ok = counted(8, false); break;
            case ops::Arg::line: ok = r.line(w); break;
            case ops::Arg::two_lines: ok = r.line(w); if (ok != UINT64_MAX) ok = r.line(w); break;
        }
        if (ok == UINT64_MAX) break;
        // CPython's framer commits a frame before an opcode that would not fit (large ones go unframed),
        // so no opcode it writes starts inside a frame and ends past it.
        if (at >= w.frame_lo && at < w.frame_hi && r.pos() > w.frame_hi) w.overrun = std::min(w.overrun, at);
        on_op(Walk::Op{at, op, arg, r.pos()});
        if (op == ops::STOP) break;
    }
}

// The bytes an opcode's text argument spans, without its newline(s).
std::string_view line_at(ByteView pk, uint64_t from) {
    uint64_t e = from;
    while (e < pk.size && pk.data[e] != '\n') ++e;
    return {reinterpret_cast<const char*>(pk.data + from), e - from};
}

bool text_opcode(uint8_t op) {
    return op == ops::BINUNICODE || op == ops::SHORT_BINUNICODE || op == ops::BINUNICODE8 ||
           op == ops::SHORT_BINSTRING || op == ops::BINSTRING;
}
bool bytes_opcode(uint8_t op) {
    return op == ops::BINBYTES || op == ops::SHORT_BINBYTES || op == ops::BINBYTES8 || op == ops::BYTEARRAY8;
}

// Hex or base64 text long enough to carry a pickle, whose decoding starts like one.
bool text_pickle(std::string_view t, std::string& out) {
    if (t.size() < 16) return false;
    bool hex = t.size() % 2 == 0, b64 = t.size() % 4 == 0;
    for (char c : t) {
        bool h = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
        bool b = h || (c >= 'g' && c <= 'z') || (c >= 'G' && c <= 'Z') || c == '+' || c == '/' || c == '=' ||
                 c == '-' || c == '_';
        hex &= h;
        b64 &= b;
        if (!hex && !b64) return false;
    }
    if (hex && decode_hex(t, out) && proto_start({reinterpret_cast<const uint8_t*>(out.data()), out.size()})) return true;
    bool url = t.find_first_of("-_") != std::string_view::npos;
    return b64 && decode_base64(t, out, url) && proto_start({reinterpret_cast<const uint8_t*>(out.data()), out.size()});
}

// References the value graph holds, counting a shared value once per reference (cycles once):
// what a copy, a print or any walk of the loaded object visits.
uint64_t references(const Value* root) {
    std::unordered_map<const Value*, uint64_t> done;  // value → its count; 0 while on the path
    struct Frame { const Value* v; uint64_t sum; size_t next; };
    std::vector<Frame> stack{{root, 1, 0}};
    done[root] = 0;
    auto child = [](const Value* v, size_t n) -> const Value* {
        size_t a = v->items().size(), b = v->entries().size();
        if (n < a) return v->items()[n];
        if (n < a + b) return v->entries()[n - a];
        n -= a + b;
        const Value* extra[3] = {v->args(), v->state, v->callable()};
        return n < 3 ? extra[n] : reinterpret_cast<const Value*>(1);
    };
    constexpr uint64_t cap = 1ull << 62;
    while (true) {
        Frame& f = stack.back();
        const Value* c = child(f.v, f.next++);
        if (c == reinterpret_cast<const Value*>(1)) {
            uint64_t s = f.sum;
            done[f.v] = s;
            stack.pop_back();
            if (stack.empty()) return s;
            stack.back().sum = std::min(cap, stack.back().sum + s);
            continue;
        }
        if (!c) continue;
        auto it = done.find(c);
        if (it != done.end()) {
            f.sum = std::min(cap, f.sum + std::max<uint64_t>(it->second, 1));
            continue;
        }
        done[c] = 0;
        stack.push_back({c, 1, 0});
    }
}

}  // namespace

PickleScanner::Result PickleScanner::scan(ByteView data, uint64_t base, const std::string& record, bool tentative,
                                          const RootVisitor& on_root, int depth) {
    return scan_nested(data, base, record, tentative, depth, on_root);
}

PickleScanner::Result PickleScanner::scan_nested(ByteView data, uint64_t base, const std::string& record,
                                                 bool tentative, int depth, const RootVisitor& on_root) {
    Result out;
    size_t at = m_r.pickles.size();
    m_r.pickles.push_back({record, base, data.size, 0});

    ValueArena arena;
    ScanHooks hooks(arena, data, base);
    hooks.joblib = !m_plain;
    PickleProgress progress;
    const Value* root = nullptr;
    uint64_t fault = UINT64_MAX;
    try {
        PickleResult res = run_pickle(data, arena, hooks, record, base, {}, nullptr, &progress);
        out.end = res.end;
        root = res.root;
        m_r.pickles[at].protocol = res.protocol;
        m_r.pickles[at].size = res.end;
    } catch (const Error& e) {
        fault = e.offset().value_or(base);
        out.fault = fault >= base && fault - base < data.size ? fault - base : 0;
        if (progress.opcodes == 0) {
            out.not_a_pickle = true;
            m_r.pickles.pop_back();
            note("not_a_pickle", record, fault, "not a pickle: its first opcode cannot be read (" + e.message() +
                                                    "), so an unpickler fails before it imports anything");
            return out;
        }
        std::string what = "the pickle breaks at " + at_byte(fault) + " (" + e.message() + "): an unpickler runs the " +
                           std::to_string(progress.opcodes) + (progress.opcodes == 1 ? " opcode" : " opcodes") +
                           " before that point, then fails";
        if (tentative) note("parse_error", record, fault, what);
        else finding({"malformed_pickle", GlobalClass::dangerous, "", record, fault, "", "",
                      what + "; no pickler writes such a stream (crafted, or damaged)"});
    }

    // Globals, each once per opcode kind that names it, judged as written.
    struct Count { uint64_t offset, count; };
    std::map<std::pair<std::string, uint8_t>, std::pair<std::pair<std::string, std::string>, Count>> named;
    auto add_name = [&](const std::string& module, const std::string& name, uint64_t offset, uint8_t op) {
        auto [it, fresh] = named.try_emplace({module + "." + name, op}, std::make_pair(module, name), Count{offset, 0});
        ++it->second.second.count;
        (void)fresh;
    };
    for (const SeenGlobal& g : hooks.globals) add_name(g.module, g.name, g.offset, g.opcode);
    out.imports = hooks.globals.size() + hooks.events.size();
    if (root && on_root) on_root(root);

    // The disassembly: structure, and what lies past a fault.
    Walk lin;
    lin.skips = hooks.inline_ranges;
    uint64_t dups = 0, gets = 0, puts = 0, protos = 0, index = 0;
    std::string_view pushed[2];
    int strings = 0;
    walk(data, false, lin, [&](const Walk::Op& o) {
        uint64_t off = base + o.pos;
        if (o.op == ops::PROTO && index > 0 && protos++ == 0 && !m_plain)
            finding({"misplaced_proto", GlobalClass::dangerous, "", record, off, "PROTO", "",
                     "a PROTO past the pickle's first opcode: picklers write one, first; a second one is an "
                     "edited stream (a scanner that stops at the first STOP or PROTO sees less than the unpickler runs)"});
        ++index;
        if (o.op == ops::DUP) ++dups;
        if (o.op == ops::BINGET || o.op == ops::LONG_BINGET || o.op == ops::GET) ++gets;
        if (o.op == ops::BINPUT || o.op == ops::LONG_BINPUT || o.op == ops::PUT || o.op == ops::MEMOIZE) ++puts;
        // The strings the last two opcodes pushed (memo puts and FRAMEs between them aside): what a
        // STACK_GLOBAL past a fault most likely names.
        bool put = o.op == ops::MEMOIZE || o.op == ops::BINPUT || o.op == ops::LONG_BINPUT || o.op == ops::PUT ||
                   o.op == ops::FRAME;
        if (text_opcode(o.op) || o.op == ops::UNICODE) {
            pushed[0] = pushed[1];
            pushed[1] = o.op == ops::UNICODE ? line_at(data, o.arg) : ByteView{data.data + o.arg, o.end - o.arg}.as_chars();
            strings = std::min(strings + 1, 2);
        } else if (!put && o.op != ops::STACK_GLOBAL) {
            strings = 0;
        }
        if (off >= fault && fault != UINT64_MAX) {
            // Past the fault: CPython stops there, another reader may not; names are judged anyway.
            if (o.op == ops::GLOBAL || o.op == ops::INST) {
                std::string_view module = line_at(data, o.arg);
                std::string_view name = line_at(data, o.arg + module.size() + 1);
                if (importable_module_name(module) && !name.empty() && pickle_text::valid_utf8(name))
                    add_name(std::string(module), std::string(name), off, o.op);
            } else if (o.op == ops::STACK_GLOBAL && strings == 2 && importable_module_name(pushed[0]) && !pushed[1].empty()) {
                add_name(std::string(pushed[0]), std::string(pushed[1]), off, o.op);
            } else if (o.op == ops::STACK_GLOBAL || o.op == ops::EXT1 || o.op == ops::EXT2 || o.op == ops::EXT4) {
                finding({o.op == ops::STACK_GLOBAL ? "computed_global" : "extension_code", GlobalClass::dangerous, "",
                         record, off, ops::name(o.op), "",
                         std::string(ops::name(o.op)) + " past the point where the pickle breaks: the name it imports "
                                                        "is not known without running it"});
            }
        }
        if (depth >= k_max_nesting) return;
        ByteView payload{data.data + o.arg, o.end - o.arg};
        if (bytes_opcode(o.op) && nested_candidate(payload)) hooks.nested.push_back({payload, off, "bytes", false});
        std::string decoded;
        if (text_opcode(o.op) && text_pickle(payload.as_chars(), decoded)) {
            std::string_view kept = arena.own(decoded);
            hooks.nested.push_back({{reinterpret_cast<const uint8_t*>(kept.data()), kept.size()}, off,
                                    "hex or base64 text", false});
        }
    });

    // FRAME lengths that end inside an opcode: read it again as the C unpickler reads a file. Without
    // FRAMEs the two readings are one; with them, the byte ranges are kept only for a second walk.
    Walk file;
    if (lin.frames) walk(data, true, file, [](const Walk::Op&) {});
    if (file.straddle != UINT64_MAX) {
        file.record = true;
        walk(data, true, file, [](const Walk::Op&) {});
    }
    if (!m_plain && (file.straddle != UINT64_MAX || file.nested_frame != UINT64_MAX || lin.overrun != UINT64_MAX)) {
        uint64_t where = std::min({file.straddle, file.nested_frame, lin.overrun});
        finding({"frame_violation", GlobalClass::dangerous, "", record, base + where, "FRAME", "",
                 file.straddle != UINT64_MAX
                     ? "a FRAME ends inside an opcode: pickle.loads and pickletools read one sequence of opcodes, "
                       "the C unpickler reading a file (as torch.load does) another; both are scanned"
                 : file.nested_frame != UINT64_MAX ? "a FRAME opens inside another frame, which no pickler writes"
                                                   : "an opcode starts inside a FRAME and ends past it, which no pickler writes"});
        if (file.straddle != UINT64_MAX && depth < k_max_nesting) {
            std::string stream;
            for (auto [from, n] : file.consumed) stream.append(reinterpret_cast<const char*>(data.data + from), n);
            std::string_view kept = arena.own(stream);
            size_t f0 = m_r.findings.size(), g0 = m_r.globals.size(), n0 = m_r.notes.size();
            scan_nested({reinterpret_cast<const uint8_t*>(kept.data()), kept.size()}, base,
                        record + " > as the C unpickler reads it from a file", tentative, depth + 1);
            // Its offsets back in the file: each byte of the stream came from one of the ranges read.
            auto to_file = [&](uint64_t& off) {
                if (off < base || off - base >= stream.size()) return;
                uint64_t e = off - base;
                for (auto [from, n] : file.consumed) {
                    if (e < n) {
                        off = base + from + e;
                        return;
                    }
                    e -= n;
                }
            };
            for (size_t k = f0; k < m_r.findings.size(); ++k) to_file(m_r.findings[k].offset);
            for (size_t k = g0; k < m_r.globals.size(); ++k) to_file(m_r.globals[k].offset);
            for (size_t k = n0; k < m_r.notes.size(); ++k) to_file(m_r.notes[k].offset);
        }
    }

    for (const auto& [key, v] : named) {
        const auto& [mn, c] = v;
        GlobalVerdict verdict = m_policy.judge(mn.first, mn.second);
        // Verdicts that rest on how the pickle calls a name hold only where it is never handed on.
        bool passed = hooks.passed_as_values.count(mn.first + "." + mn.second) > 0;
        if (hooks.methods.only_methods() && canonical_module(mn.first) == "builtins" && mn.second == "getattr" && !passed)
            verdict = bound_method_verdict(hooks.methods.only_methods(), hooks.methods.example());
        if (mn.first == "torch.storage" && mn.second == "_load_from_bytes" && hooks.loads_of_constant_bytes && !hooks.other_loads && !passed)
            verdict = {GlobalClass::benign, "storage bytes",
                       "how pickle.dumps of a tensor stores its storage (TransformerEngine's _extra_state holds such "
                       "pickles): it loads back torch.save bytes that this pickle holds, and those are scanned as a file "
                       "of their own",
                       false};
        const char* opname = ops::name(key.second);
        m_r.globals.push_back({key.first, verdict.cls, verdict.rule, verdict.reason, verdict.weights_only, record,
                               c.offset, opname, c.count});
        if (global_is_finding(verdict.cls))
            finding({"global", verdict.cls, key.first, record, c.offset, opname, verdict.rule,
                     key.first + ": " + verdict.reason + (c.offset >= fault ? " (past the point where the pickle breaks)" : "")});
    }
    // Each kind of event once per global (the first), with how often it happened.
    std::map<std::pair<std::string, std::string>, std::pair<const ScanEvent*, uint64_t>> events;
    for (const ScanEvent& e : hooks.events) {
        auto [it, fresh] = events.try_emplace({e.kind, e.global}, &e, 0);
        ++it->second.second;
        (void)fresh;
    }
    for (const ScanEvent& e : hooks.events) {
        auto& [first, n] = events[{e.kind, e.global}];
        if (first != &e) continue;
        finding({e.kind, e.severity, e.global, record, e.offset, e.opcode ? ops::name(e.opcode) : "", "",
                 e.message + (n > 1 ? " (" + std::to_string(n - 1) + " more times in this pickle)" : "")});
    }

    if (root && (dups > 0 || gets > 2 * puts + 32)) {  // amplification needs DUPs or many GETs
        uint64_t refs = references(root);
        if (refs > k_expansion_references)
            finding({"expansion", GlobalClass::dangerous, "", record, base, "", "",
                     "the object this pickle builds holds " + std::to_string(refs) + " references to " +
                         std::to_string(arena.count()) + " values (shared " + std::to_string(dups) +
                         " times by DUP, " + std::to_string(gets) + " by memo): building it is cheap, but a "
                         "copy, a print or any walk of it exhausts memory"});
    }

    // joblib.load steps over its arrays' bytes; pickle.load (numpy.load's, a plain one) runs them as
    // opcodes: that reading is scanned too.
    if (!hooks.inline_ranges.empty() && !m_plain) {
        m_plain = true;
        scan_nested(data, base, record + " > as pickle.load reads it (arrays' bytes as opcodes)", true, depth);
        m_plain = false;
    }
    for (const NestedBytes& n : hooks.nested) {
        if (depth >= k_max_nesting || !m_nested_seen.insert({record, n.offset, n.bytes.size}).second) continue;
        std::string where = record + " > " + n.why + " at " + at_byte(n.offset);
        // Bytes handed to a loader are read as that loader reads a file (a zip, a legacy stream, a
        // pickle), and so are bytes that hold an archive; bytes that only look like a pickle are
        // judged by what they import, and a fault in them is a note.
        bool archive = n.bytes.size >= 4 && n.bytes.data[0] == 'P' && n.bytes.data[1] == 'K';
        if (m_blob && (n.surely || archive)) {
            note("nested_pickle", where, n.offset, n.why + (archive ? " that hold an archive (scanned as well)" : " (scanned as a file of their own)"));
            m_blob(n.bytes, n.offset, where, n.surely, depth + 1);
            continue;
        }
        note("nested_pickle", where, n.offset, n.why + " that is itself a pickle (scanned as well)");
        scan_nested(n.bytes, n.offset, where, !n.surely, depth + 1);
    }
    return out;
}

}  // namespace ckpt
