// The text of values: Python-like repr, float and big-integer text, global and type names (the
// value tree itself and its arena are value.cpp).
#include "ckpt/value.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>


namespace ckpt {

std::string repr_float(double d) {
    if (std::isnan(d)) return "nan";
    if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
    char buf[40];
    for (int p = 1; p <= 17; ++p) {
        std::snprintf(buf, sizeof buf, "%.*g", p, d);
        if (std::strtod(buf, nullptr) == d) break;
    }
    std::string s = buf;
    if (s.find_first_of(".e") == std::string::npos) s += ".0";
    return s;
}

std::string big_integer_decimal(std::string_view le) {
    if (le.empty()) return "0";
    bool negative = static_cast<uint8_t>(le.back()) & 0x80;
    std::vector<uint8_t> mag(le.begin(), le.end());
    if (negative) {  // two's complement → magnitude
        for (auto& b : mag) b = static_cast<uint8_t>(~b);
        for (auto& b : mag) {
            if (++b != 0) break;
        }
    }
    std::string digits;
    // Repeated division by 10 of a little-endian base-256 number.
    while (true) {
        bool zero = true;
        for (uint8_t b : mag) zero = zero && b == 0;
        if (zero) break;
        unsigned rem = 0;
        for (size_t i = mag.size(); i-- > 0;) {
            unsigned cur = (rem << 8) | mag[i];
            mag[i] = static_cast<uint8_t>(cur / 10);
            rem = cur % 10;
        }
        digits.push_back(static_cast<char>('0' + rem));
    }
    if (digits.empty()) digits = "0";
    if (negative) digits.push_back('-');
    return {digits.rbegin(), digits.rend()};
}

std::string global_name(const Value* v) {
    if (!v) return "";
    if (v->kind == ValueKind::object) return global_name(v->callable());
    if (v->kind != ValueKind::global) return "";
    std::string out(v->s());
    out += '.';
    out += v->s2;
    return out;
}

std::string type_name(const Value* v) {
    switch (v->kind) {
        case ValueKind::none: return "None";
        case ValueKind::boolean: return "bool";
        case ValueKind::integer:
        case ValueKind::big_integer: return "int";
        case ValueKind::floating: return "float";
        case ValueKind::complex: return "complex";
        case ValueKind::string: return "str";
        case ValueKind::bytes: return "bytes";
        case ValueKind::bytearray: return "bytearray";
        case ValueKind::tuple: return v->s2.empty() ? "tuple" : std::string(v->s2);
        case ValueKind::list: return "list";
        case ValueKind::dict: return v->s2.empty() ? "dict" : std::string(v->s2);
        case ValueKind::set: return "set";
        case ValueKind::frozenset: return "frozenset";
        case ValueKind::global: return "global";
        case ValueKind::object: {
            std::string n = global_name(v->callable());
            return n.empty() ? "object" : n;
        }
        case ValueKind::tensor: return "tensor";
        case ValueKind::storage: return "storage";
        case ValueKind::dtype: return "torch.dtype";
        case ValueKind::device: return "torch.device";
    }
    return "?";
}

namespace {

void quote(std::string& out, std::string_view s, bool bytes) {
    char q = (s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos)
                 ? '"'
                 : '\'';
    out += q;
    for (unsigned char c : s) {
        if (c == '\\' || c == static_cast<unsigned char>(q)) {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c == '\n') {
            out += "\\n";
        } else if (c == '\t') {
            out += "\\t";
        } else if (c == '\r') {
            out += "\\r";
        } else if (c < 0x20 || c == 0x7f || (bytes && c >= 0x80)) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
        } else {
            out += static_cast<char>(c);
        }
    }
    out += q;
}

// numpy.core.multiarray.scalar(dtype('f8'), b'...') → "numpy.float64(0.5)"; empty if not decodable.
std::string numpy_scalar(const Value* v) {
    std::string cls = global_name(v->callable());
    if (cls != "numpy.core.multiarray.scalar" && cls != "numpy._core.multiarray.scalar") return "";
    if (!v->args() || v->args()->items().size() < 2) return "";
    const Value* dt = v->args()->items()[0];
    const Value* data = v->args()->items()[1];
    if (dt->kind != ValueKind::object || !dt->args() || dt->args()->items().empty() ||
        dt->args()->items()[0]->kind != ValueKind::string || data->kind != ValueKind::bytes)
        return "";
    std::string_view code = dt->args()->items()[0]->s();
    if (dt->state && dt->state->kind == ValueKind::tuple && dt->state->items().size() > 1 &&
        dt->state->items()[1]->kind == ValueKind::string && dt->state->items()[1]->s() == ">")
        return "";  // big-endian scalars are rare enough to show raw
    std::string_view b = data->s();
    auto load = [&](auto zero) {
        decltype(zero) x{};
        if (b.size() == sizeof x) std::memcpy(&x, b.data(), sizeof x);
        return x;
    };
    std::string body;
    if (code == "f8" && b.size() == 8) body = "numpy.float64(" + repr_float(load(double{})) + ")";
    else if (code == "f4" && b.size() == 4) body = "numpy.float32(" + repr_float(load(float{})) + ")";
    else if (code == "i8" && b.size() == 8) body = "numpy.int64(" + std::to_string(load(int64_t{})) + ")";
    else if (code == "i4" && b.size() == 4) body = "numpy.int32(" + std::to_string(load(int32_t{})) + ")";
    else if (code == "u8" && b.size() == 8) body = "numpy.uint64(" + std::to_string(load(uint64_t{})) + ")";
    else if (code == "b1" && b.size() == 1) body = std::string("numpy.bool_(") + (b[0] ? "True" : "False") + ")";
    return body;
}

class Repr {
public:
    Repr(size_t max_chars, int max_depth) : m_max(max_chars), m_max_depth(max_depth) {}

    void value(const Value* v, int depth) {
        if (full()) return;
        if (depth > m_max_depth || on_path(v)) {
            m_out += "…";
            return;
        }
        m_path.push_back(v);
        body(v, depth);
        m_path.pop_back();
    }
    std::string take() {
        if (m_out.size() > m_max) {
            size_t cut = m_max;
            while (cut > 0 && (static_cast<unsigned char>(m_out[cut]) & 0xc0) == 0x80) --cut;
            m_out.resize(cut);
            m_out += "…";
        }
        return std::move(m_out);
    }

private:
    bool full() const { return m_out.size() > m_max; }
    bool on_path(const Value* v) const {
        for (const Value* p : m_path)
            if (p == v) return true;
        return false;
    }
    void seq(ValueSpan items, int depth) {
        for (size_t n = 0; n < items.size() && !full(); ++n) {
            if (n) m_out += ", ";
            value(items[n], depth + 1);
        }
    }
    void pairs(ValueSpan entries, int depth) {
        for (size_t n = 0; n + 1 < entries.size() && !full(); n += 2) {
            if (n) m_out += ", ";
            value(entries[n], depth + 1);
            m_out += ": ";
            value(entries[n + 1], depth + 1);
        }
    }
    void body(const Value* v, int depth) {
        switch (v->kind) {
            case ValueKind::none: m_out += "None"; return;
            case ValueKind::boolean: m_out += v->i() ? "True" : "False"; return;
            case ValueKind::integer: m_out += std::to_string(v->i()); return;
            case ValueKind::big_integer:
                m_out += v->s().size() > 4096 ? "<int of " + std::to_string(v->s().size()) + " bytes>"
                                            : big_integer_decimal(v->s());
                return;
            case ValueKind::floating: m_out += repr_float(v->f()); return;
            case ValueKind::complex:
                m_out += "(" + repr_float(v->f()) + (v->f2() < 0 ? "" : "+") + repr_float(v->f2()) + "j)";
                return;
            case ValueKind::string: quote(m_out, v->s(), false); return;
            case ValueKind::bytes: m_out += 'b'; quote(m_out, v->s(), true); return;
            case ValueKind::bytearray:
                m_out += "bytearray(b";
                quote(m_out, v->s(), true);
                m_out += ')';
                return;
            case ValueKind::tuple:
                if (!v->s2.empty()) {
                    m_out += std::string(v->s2) + "([";
                    seq(v->items(), depth);
                    m_out += "])";
                    return;
                }
                m_out += '(';
                seq(v->items(), depth);
                if (v->items().size() == 1) m_out += ',';
                m_out += ')';
                return;
            case ValueKind::list: m_out += '['; seq(v->items(), depth); m_out += ']'; return;
            case ValueKind::dict:
                if (!v->s2.empty()) m_out += v->s2 == "collections.OrderedDict" ? "OrderedDict(" : std::string(v->s2) + "(";
                m_out += '{';
                pairs(v->entries(), depth);
                m_out += '}';
                if (!v->s2.empty()) m_out += ')';
                return;
            case ValueKind::set:
            case ValueKind::frozenset:
                if (v->items().empty()) {
                    m_out += v->kind == ValueKind::set ? "set()" : "frozenset()";
                    return;
                }
                if (v->kind == ValueKind::frozenset) m_out += "frozenset(";
                m_out += '{';
                seq(v->items(), depth);
                m_out += '}';
                if (v->kind == ValueKind::frozenset) m_out += ')';
                return;
            case ValueKind::global: m_out += global_name(v); return;
            case ValueKind::object: object(v, depth); return;
            case ValueKind::tensor: m_out += "tensor(" + std::string(v->s()) + ")"; return;
            case ValueKind::storage:  // "float32, 16 elements" and the key, or a legacy view's own text
                m_out.append("storage(").append(v->s());
                if (!v->s2.empty()) m_out.append(", key ").append(v->s2);
                m_out += ')';
                return;
            case ValueKind::dtype: m_out += "torch." + std::string(v->s2); return;
            case ValueKind::device:
                m_out += "device(type='" + std::string(v->s()) + "'";
                if (v->i() >= 0) m_out += ", index=" + std::to_string(v->i());
                m_out += ')';
                return;
        }
    }
    void object(const Value* v, int depth) {
        std::string np = numpy_scalar(v);
        if (!np.empty()) {
            m_out += np;
            return;
        }
        m_out += global_name(v->callable()).empty() ? "object" : global_name(v->callable());
        m_out += '(';
        bool first = true;
        if (v->args() && (v->args()->kind == ValueKind::tuple) && !v->args()->items().empty()) {
            seq(v->args()->items(), depth);
            first = false;
        }
        // Attribute state (a dict of str keys), shown as keyword arguments, like argparse.Namespace.
        const Value* st = v->state;
        if (st && st->kind == ValueKind::tuple && st->items().size() == 2 &&
            st->items()[0]->kind == ValueKind::dict)
            st = st->items()[0];  // (dict, slots) state
        if (st && st->kind == ValueKind::dict) {
            for (size_t n = 0; n < st->dict_size() && !full(); ++n) {
                if (!first) m_out += ", ";
                first = false;
                const Value* k = st->dict_key(n);
                if (k->kind == ValueKind::string) m_out += std::string(k->s());
                else value(k, depth + 1);
                m_out += '=';
                value(st->dict_value(n), depth + 1);
            }
        } else if (st && st->kind != ValueKind::none) {
            if (!first) m_out += ", ";
            m_out += "state=";
            value(st, depth + 1);
        }
        if (!v->items().empty()) {
            m_out += first ? "items=[" : ", items=[";
            seq(v->items(), depth);
            m_out += ']';
            first = false;
        }
        if (!v->entries().empty()) {
            m_out += first ? "{" : ", {";
            pairs(v->entries(), depth);
            m_out += '}';
        }
        m_out += ')';
    }

    size_t m_max;
    int m_max_depth;
    std::string m_out;
    std::vector<const Value*> m_path;
};

}  // namespace

std::string repr(const Value* v, size_t max_chars, int max_depth) {
    if (!v) return "nothing";  // a field that is absent
    Repr r(max_chars, max_depth);
    r.value(v, 0);
    return r.take();
}

}  // namespace ckpt
