#include "scan/scan_hooks.hpp"
#include "base/text_util.hpp"

#include <algorithm>
#include <memory>

#include "ckpt/globals.hpp"
#include "io/decompress.hpp"
#include "pickle/pickle_ops.hpp"
#include "pickle/pickle_text.hpp"

namespace ckpt {

namespace ops = pickle_ops;

namespace {

std::string name_of(const Value* g) { return std::string(g->s()) + "." + std::string(g->s2); }

// Made while unpickling (the result of a call, an attribute), not written as a constant.
bool computed(const Value* v) { return v->kind == ValueKind::object || v->kind == ValueKind::global; }

std::string describe(const Value* v) {
    if (computed_placeholder(v)) return "a name computed at load time";
    if (v->kind == ValueKind::global) return "the global " + name_of(v);
    if (v->kind == ValueKind::object && v->callable() && v->callable()->kind == ValueKind::global &&
        !computed_placeholder(v->callable()))
        return "what " + name_of(v->callable()) + " returned";
    return "a computed value";
}

// Lowercase classes whose instances a pickle fills with SETITEMS/APPENDS, and the constructors of
// instances (copyreg's), which are no "function returning data" for that purpose.
constexpr std::string_view k_container_makers[] = {
    "builtins.bytearray", "builtins.dict", "builtins.frozenset", "builtins.list", "builtins.object",
    "builtins.set", "builtins.tuple", "collections.defaultdict", "collections.deque", "copyreg.__newobj__",
    "copyreg.__newobj_ex__", "copyreg._reconstructor", "numpy._core.multiarray._reconstruct",
    "numpy.core.multiarray._reconstruct",
};

// A function on the allow-lists (torch's rebuild functions, _codecs.encode, len …): it returns data,
// so NEWOBJ of it, or SETITEM/APPEND into what it returned, is no thing a pickler writes.
// Reviewed classes with lower-case names (dataclasses of distributed training's checkpoints).
constexpr std::string_view k_lowercase_classes[] = {"deepspeed.utils.tensor_fragment.fragment_address"};

bool allowed_function(const Value* g) {
    if (g->kind != ValueKind::global || computed_placeholder(g)) return false;
    std::string_view name = g->s2;
    std::string_view last = name.substr(name.rfind('.') == std::string_view::npos ? 0 : name.rfind('.') + 1);
    while (last.size() > 1 && last[0] == '_') last.remove_prefix(1);  // _StorageInfo is a class, _rebuild_tensor a function
    if (last.empty() || !(last[0] == '_' || (last[0] >= 'a' && last[0] <= 'z'))) return false;
    std::string full = name_of(g);
    for (std::string_view c : k_container_makers)
        if (c == full) return false;
    for (std::string_view c : k_lowercase_classes)
        if (c == full) return false;
    return global_is_known(GlobalPolicy::standard().judge(g->s(), g->s2).cls);
}

// The names of functions that unpickle the bytes they are given.
constexpr std::string_view k_loaders[] = {
    "_pickle.load", "_pickle.loads", "cloudpickle.load", "cloudpickle.loads", "dill._dill.loads", "dill.load",
    "dill.loads", "joblib.load", "numpy.load", "numpy.loads", "pickle.load", "pickle.loads",
    "torch.load", "torch.serialization.load", "torch.storage._load_from_bytes",
};

bool loader(const std::string& fn) {
    for (std::string_view l : k_loaders)
        if (l == fn) return true;
    return false;
}


// A numpy.dtype the pickle built: numpy.dtype('f8', False, True) by REDUCE, then BUILD with its state
// (version, byte order, subarray, names, fields, item size, alignment, flags): its item size (0 when
// not known) and whether it holds objects (an 'O' code, the flags' NPY_ITEM_HASOBJECT bit, a field
// that does).
struct NumpyDtype {
    uint64_t itemsize = 0;
    bool objects = false;
};

NumpyDtype numpy_dtype(const Value* d, int depth = 0) {
    NumpyDtype out;
    const Value* c = d ? d->callable() : nullptr;
    if (!c || c->kind != ValueKind::global || c->s() != "numpy" || c->s2 != "dtype" || depth > 16) return out;
    ValueSpan a = d->args() ? d->args()->items() : ValueSpan();
    if (a.empty() || a[0]->kind != ValueKind::string || a[0]->s().empty()) return out;
    // numpy.dtype's text as numpy takes it: a byte order, then a type code with an optional size
    // ('f', 'f4', 'O8', 'U5', 'V16') or a name ('float32', 'int64', 'object').
    std::string_view code = a[0]->s();
    while (!code.empty() && (code[0] == '<' || code[0] == '>' || code[0] == '|' || code[0] == '=')) code.remove_prefix(1);
    if (code.empty()) return out;
    static constexpr std::pair<std::string_view, uint64_t> k_names[] = {
        {"bool", 1}, {"bool_", 1}, {"byte", 1}, {"ubyte", 1}, {"short", 2}, {"ushort", 2}, {"intc", 4}, {"uintc", 4},
        {"int", 8}, {"int_", 8}, {"uint", 8}, {"longlong", 8}, {"ulonglong", 8}, {"intp", 8}, {"uintp", 8},
        {"half", 2}, {"single", 4}, {"double", 8}, {"float", 8}, {"float_", 8}, {"longdouble", 16},
        {"csingle", 8}, {"cdouble", 16}, {"complex", 16}, {"complex_", 16}, {"clongdouble", 32},
    };
    for (const auto& [nm, size] : k_names)
        if (code == nm) out.itemsize = size;
    if (code == "object" || code == "object_" || code == "object0" || code == "O") out.objects = true, out.itemsize = 8;
    if (!out.itemsize && !out.objects) {
        // a name with its bits (float32, uint8, complex64) or a code with its bytes (f4, U5)
        size_t digits = code.find_first_of("0123456789");
        std::string_view head = code.substr(0, digits);
        uint64_t n = 0;
        bool number = digits != std::string_view::npos;
        for (size_t i = digits; number && i < code.size(); ++i) {
            if (code[i] < '0' || code[i] > '9' || n > (1u << 30)) number = false;
            else n = n * 10 + static_cast<uint64_t>(code[i] - '0');
        }
        static constexpr std::pair<char, uint64_t> k_codes[] = {
            {'?', 1}, {'b', 1}, {'B', 1}, {'h', 2}, {'H', 2}, {'i', 4}, {'I', 4}, {'l', 8}, {'L', 8}, {'q', 8}, {'Q', 8},
            {'p', 8}, {'P', 8}, {'e', 2}, {'f', 4}, {'d', 8}, {'g', 16}, {'F', 8}, {'D', 16}, {'G', 32}, {'M', 8}, {'m', 8},
        };
        if (head == "float" || head == "int" || head == "uint" || head == "complex" || head == "bool") {
            if (number && n % 8 == 0) out.itemsize = n / 8;
        } else if (head.size() == 1) {
            char k = head[0];
            if (number) out.itemsize = k == 'U' ? 4 * n : n;
            else
                for (const auto& [c, size] : k_codes)
                    if (c == k) out.itemsize = size;
            out.objects = k == 'O';
        }
    }
    if (d->state && d->state->kind == ValueKind::tuple) {
        ValueSpan st = d->state->items();
        // The state's item size counts for a flexible type only (numpy keeps a fixed type's own).
        bool flexible = !code.empty() && (code[0] == 'V' || code[0] == 'S' || code[0] == 'U' || code[0] == 'a');
        if (st.size() > 5 && st[5]->kind == ValueKind::integer && st[5]->i() > 0 && (flexible || !out.itemsize))
            out.itemsize = static_cast<uint64_t>(st[5]->i());
        if (st.size() > 7 && st[7]->kind == ValueKind::integer && (st[7]->i() & 1)) out.objects = true;
        if (st.size() > 4 && st[4]->kind == ValueKind::dict)
            for (size_t k = 0; k < st[4]->dict_size(); ++k) {
                const Value* f = st[4]->dict_value(k);
                if (f->kind == ValueKind::tuple && !f->items().empty()) out.objects |= numpy_dtype(f->items()[0], depth + 1).objects;
            }
        if (st.size() > 2 && st[2]->kind == ValueKind::tuple && !st[2]->items().empty())
            out.objects |= numpy_dtype(st[2]->items()[0], depth + 1).objects;
    }
    return out;
}

}  // namespace

bool decode_hex(std::string_view t, std::string& out, bool skip_blanks) {
    out.clear();
    int high = -1;
    for (char c : t) {
        if (skip_blanks && (c == ' ' || c == '\t' || c == '\n' || c == '\r')) continue;
        int d = text::hex_digit(c);
        if (d < 0) return false;
        if (high < 0) {
            high = d;
        } else {
            out += static_cast<char>((high << 4) | d);
            high = -1;
        }
    }
    return high < 0;
}

bool decode_base64(std::string_view t, std::string& out, bool url) {
    out.clear();
    uint32_t acc = 0;
    int bits = 0, pad = 0;
    for (char c : t) {
        int v;
        if (c >= 'A' && c <= 'Z') v = c - 'A';
        else if (c >= 'a' && c <= 'z') v = c - 'a' + 26;
        else if (c >= '0' && c <= '9') v = c - '0' + 52;
        else if (c == (url ? '-' : '+')) v = 62;
        else if (c == (url ? '_' : '/')) v = 63;
        else if (c == '=') { ++pad; continue; }
        else continue;  // Python's b64decode (validate=False) skips what is not in the alphabet
        if (pad) return false;
        acc = (acc << 6) | static_cast<uint32_t>(v);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out += static_cast<char>((acc >> bits) & 0xff);
        }
    }
    return bits < 6 && !out.empty();
}

Value* ScanHooks::global(Value* g, std::string_view written) {
    globals.push_back({std::string(written), std::string(g->s2), g->offset, opcode_at(g->offset)});
    return g;
}

Value* ScanHooks::placeholder(uint64_t offset, std::string_view what) {
    Value* g = m_arena.make(ValueKind::global, offset);
    g->s2 = what;  // an empty module marks it (no GLOBAL can have one)
    return g;
}

// torch's own persistent_load reads storages; a plain pickle.load refuses the opcode. Neither runs
// what the pickle names, so the id stays a value the scan can look into.
Value* ScanHooks::persistent_load(Value* pid, uint64_t) { return pid; }

Value* ScanHooks::computed_global(Value* module, Value* name, uint64_t offset) {
    if (!computed(module) && !computed(name)) return nullptr;  // constants that are no str: CPython fails
    events.push_back({"computed_global", "", offset, ops::STACK_GLOBAL,
                      "STACK_GLOBAL of " + describe(module) + " and " + describe(name) +
                          ": the name it imports is made while unpickling, so nothing can say before "
                          "it runs what it is"});
    return placeholder(offset, "<computed by STACK_GLOBAL>");
}

Value* ScanHooks::extension(uint32_t code, uint64_t offset) {
    events.push_back({"extension_code", "", offset, opcode_at(offset),
                      "extension code " + std::to_string(code) +
                          ": the unpickler imports whatever copyreg's registry maps it to, and an "
                          "earlier call can register any name there"});
    return placeholder(offset, "<extension code>");
}

void ScanHooks::mutate(Value* target, uint8_t op, uint64_t offset) {
    if (computed_placeholder(target)) return;  // reported where it was made
    methods.used(target);
    if (target->kind == ValueKind::global) {
        events.push_back({"mutates_global", name_of(target), offset, op,
                          std::string(ops::name(op)) + " on the global " + name_of(target) +
                              " itself: it sets attributes or items of a module, class or function "
                              "that the whole process shares (what later imports of it then get)"});
        return;
    }
    if (op == ops::BUILD || !target->callable() || !allowed_function(target->callable())) return;
    events.push_back({"mutates_result", name_of(target->callable()), offset, op,
                      std::string(ops::name(op)) + " into what " + name_of(target->callable()) +
                          " returned: that calls its __setitem__/append, which no pickler writes "
                          "(torch's weights_only loader was exploited this way, CVE-2026-24747)"});
}

// joblib.load (numpy_pickle.py, NumpyUnpickler.load_build): after BUILD of a NumpyArrayWrapper the
// array is read from the stream itself — for a dtype that holds objects a whole pickle (pickle.load
// of the same file), else a padding byte and that much padding when the wrapper records an alignment,
// then count × itemsize raw bytes. NDArrayWrapper and ZNDArrayWrapper (joblib < 0.10) read the
// array from a file beside the pickle instead.
uint64_t ScanHooks::inline_data(Value* target, uint64_t at) {
    const Value* c = target->callable();
    if (!joblib || !c || c->kind != ValueKind::global) return 0;
    std::string_view module = c->s(), name = c->s2;
    if (module != "joblib.numpy_pickle" && module != "joblib.numpy_pickle_compat" && module != "sklearn.externals.joblib.numpy_pickle")
        return 0;
    if (name == "NDArrayWrapper" || name == "ZNDArrayWrapper") {
        const Value* file = target->state ? target->state->get("filename") : nullptr;
        events.push_back({"external_file", name_of(c), target->offset, 0,
                          "joblib's " + std::string(name) + " loads its array from a file beside the pickle" +
                              (file && file->kind == ValueKind::string ? " ('" + std::string(file->s()) + "')" : std::string()) +
                              " with numpy.load(allow_pickle=True): a file this scan does not see"});
        return 0;
    }
    if (name != "NumpyArrayWrapper" || !target->state || at > m_data.size) return 0;
    const Value* st = target->state;
    NumpyDtype dt = numpy_dtype(st->get("dtype"));
    const Value* shape = st->get("shape");
    if (dt.objects) {
        // The C unpickler reads one pickle from here to its STOP.
        uint64_t p = at;
        while (p < m_data.size) {
            uint64_t n = ops::length(m_data, p);
            if (!n) {
                p = m_data.size;
                break;
            }
            bool stop = m_data.data[p] == ops::STOP;
            p += n;
            if (stop) break;
        }
        nested.push_back({{m_data.data + at, p - at}, m_base + at, "the object array joblib unpickles after its NumpyArrayWrapper", true});
        inline_ranges.emplace_back(at, p - at);
        return p - at;
    }
    if (!dt.itemsize || !shape || shape->kind != ValueKind::tuple) {
        events.push_back({"opaque_wrapper", name_of(c), target->offset, 0,
                          "a joblib array whose item size or shape scan cannot tell: joblib.load reads its bytes from the "
                          "stream after the wrapper, so what follows is not read here as joblib reads it",
                          GlobalClass::unknown});
        return 0;
    }
    uint64_t count = 1;
    for (const Value* d : shape->items()) {
        auto m = d->kind == ValueKind::integer && d->i() >= 0 ? checked_mul(count, static_cast<uint64_t>(d->i())) : std::nullopt;
        if (!m) return 0;
        count = *m;
    }
    uint64_t n = 0;
    const Value* align = st->get("numpy_array_alignment_bytes");
    if (align && align->kind != ValueKind::none) n = at < m_data.size ? 1 + m_data.data[at] : 1;
    auto raw = checked_mul(count, dt.itemsize);
    uint64_t total = raw && *raw <= UINT64_MAX - n ? n + *raw : UINT64_MAX;
    total = std::min(total, m_data.size - at);
    inline_ranges.emplace_back(at, total);
    return total;
}

// Decoding calls whose result the scan can know: the bytes replace the call's object, so a pickle
// that decodes a payload and loads it has the payload scanned too.
bool ScanHooks::decode(Value* made, const std::string& fn, ValueSpan a) {
    auto text = [&](size_t k) -> const Value* {
        return k < a.size() && (a[k]->kind == ValueKind::string || a[k]->kind == ValueKind::bytes ||
                                a[k]->kind == ValueKind::bytearray)
                   ? a[k]
                   : nullptr;
    };
    const Value* in = text(0);
    if (!in) return false;
    std::string enc = a.size() > 1 && a[1]->kind == ValueKind::string ? std::string(a[1]->s()) : "";
    std::string out;
    bool ok = false;
    if (fn == "_codecs.encode" || fn == "codecs.encode") {
        ok = in->kind == ValueKind::string && pickle_text::codecs_encode(in->s(), enc.empty() ? "utf-8" : enc, out);
    } else if (fn == "base64.b64decode" || fn == "base64.standard_b64decode" || fn == "base64.decodebytes" ||
               fn == "base64.decodestring" || fn == "binascii.a2b_base64") {
        ok = decode_base64(in->s(), out);
    } else if (fn == "base64.urlsafe_b64decode") {
        ok = decode_base64(in->s(), out, true);
    } else if (fn == "base64.b16decode" || fn == "binascii.unhexlify" || fn == "binascii.a2b_hex") {
        ok = decode_hex(in->s(), out);
    } else if (fn == "builtins.bytes.fromhex" || fn == "builtins.bytearray.fromhex") {
        ok = decode_hex(in->s(), out, true);
    } else if (fn == "_codecs.decode" || fn == "codecs.decode") {
        if (enc == "hex" || enc == "hex_codec") ok = decode_hex(in->s(), out);
        else if (enc == "base64" || enc == "base64_codec" || enc == "base_64") ok = decode_base64(in->s(), out);
    } else if ((fn == "zlib.decompress" || fn == "bz2.decompress" || fn == "lzma.decompress" || fn == "gzip.decompress") &&
               in->kind != ValueKind::string && m_decode_budget) {
        // What the module's decompress gives: zlib's one stream, bz2's and gzip's streams back to
        // back, lzma's xz or lzma-alone (FORMAT_AUTO).
        ByteView data{reinterpret_cast<const uint8_t*>(in->s().data()), in->s().size()};
        Wrapper w = fn == "zlib.decompress" ? Wrapper::zlib : fn == "bz2.decompress" ? Wrapper::bz2 : fn == "gzip.decompress" ? Wrapper::gzip
                    : sniff_wrapper(data) == Wrapper::xz ? Wrapper::xz : Wrapper::lzma;
        Decompressed d = decompress(w, data, std::min<uint64_t>(m_decode_budget, 64u << 20));
        ok = !d.bytes.empty();
        if (ok) out.assign(reinterpret_cast<const char*>(d.bytes.data()), d.bytes.size());
    }
    if (!ok || out.size() > m_decode_budget) return false;
    m_decode_budget -= out.size();
    made->kind = ValueKind::bytes;
    made->set_s(m_arena.own(out));
    if (nested_candidate({reinterpret_cast<const uint8_t*>(made->s().data()), made->s().size()}))
        nested.push_back({{reinterpret_cast<const uint8_t*>(made->s().data()), made->s().size()}, made->offset,
                          "bytes decoded by " + fn, false});
    return true;
}

// The globals in a call's arguments, a few containers deep.
static void globals_in(const Value* v, std::set<std::string>& out, int depth) {
    if (!v || depth > 4) return;
    if (v->kind == ValueKind::global && !computed_placeholder(v)) {
        out.insert(name_of(v));
        return;
    }
    if (v->kind == ValueKind::object) return;  // what a call returned: its own call was looked at
    for (const Value* c : v->items()) globals_in(c, out, depth + 1);
    for (const Value* c : v->entries()) globals_in(c, out, depth + 1);
}

Value* ScanHooks::reduce(Value* made) {
    Value* c = made->callable();
    methods.reduce(made);
    globals_in(made->args(), passed_as_values, 0);
    if (!c || computed_placeholder(c)) return nullptr;  // a computed name: reported where it was made
    if (c->kind != ValueKind::global) {
        events.push_back({"computed_call", "", made->offset, opcode_at(made->offset),
                          std::string(ops::name(opcode_at(made->offset))) + " calls " + describe(c) +
                              ", not a named global: what runs is made while unpickling"});
        return nullptr;
    }
    std::string fn = name_of(c);
    if ((made->how == MakeHow::newobj || made->how == MakeHow::newobj_ex) && allowed_function(c))
        events.push_back({"newobj_function", fn, made->offset, opcode_at(made->offset),
                          std::string(ops::name(opcode_at(made->offset))) + " of the function " + fn +
                              ": unpicklers make objects of classes only (CPython refuses this; torch's "
                              "weights_only loader did not, CVE-2026-24747)"});
    ValueSpan args = made->args() && made->args()->kind == ValueKind::tuple ? ValueSpan(made->args()->items()) : ValueSpan();
    if (decode(made, fn, args)) return made;
    if (fn == "torch.storage._load_from_bytes")
        ++(args.size() == 1 && args[0]->kind == ValueKind::bytes ? loads_of_constant_bytes : other_loads);
    if (loader(fn) && !args.empty()) {
        const Value* a = args[0];
        // torch.load(io.BytesIO(b)) hands its bytes over one call deeper.
        if (a->kind == ValueKind::object && a->callable() && a->callable()->kind == ValueKind::global &&
            a->callable()->s2 == "BytesIO" && a->args() && !a->args()->items().empty())
            a = a->args()->items()[0];
        if (a->kind == ValueKind::bytes || a->kind == ValueKind::bytearray)
            nested.push_back({{reinterpret_cast<const uint8_t*>(a->s().data()), a->s().size()}, a->offset,
                              "what " + fn + " is handed", true});
    }
    return nullptr;
}

}  // namespace ckpt
