// numpy/lib/format.py: read_magic, _check_version, _header_size_info, _read_array_header (the keys,
// shape and fortran_order checks), _filter_header (1.x's `L` suffix), descr_to_dtype; read_array
// unpickles the data when dtype.hasobject. The literal grammar is ast.literal_eval's.
#include "scan/npy_header.hpp"

#include <cctype>
#include <optional>
#include <set>
#include <vector>

namespace ckpt {

namespace {

struct Py {
    enum Kind { str, bytes, number, boolean, none, tuple, list, dict, set, unknown } kind = unknown;
    std::string s;           // str and bytes: the value; number: its text
    bool integer = false;    // number: an int (bool counts as one for shape)
    std::vector<Py> items;   // tuple, list, set; dict: k0, v0, k1, v1 …
};

struct Unsure {};   // a spelling this parser does not decide (ast.literal_eval may take it)
struct Refused {};  // ast.literal_eval refuses it for sure

class Literal {
public:
    Literal(std::string_view t, bool long_suffix) : m_t(t), m_long(long_suffix) {}

    Py parse() {
        // literal_eval strips leading spaces and tabs; a header then holds one expression.
        while (m_p < m_t.size() && (m_t[m_p] == ' ' || m_t[m_p] == '\t')) ++m_p;
        Py v = expr();
        skip(false);
        if (m_p != m_t.size()) throw Refused{};
        return v;
    }

private:
    // Blanks, comments and line continuations; newlines too inside brackets.
    void skip(bool in_brackets) {
        while (m_p < m_t.size()) {
            char c = m_t[m_p];
            if (c == ' ' || c == '\t' || c == '\f') ++m_p;
            else if (c == '#') while (m_p < m_t.size() && m_t[m_p] != '\n' && m_t[m_p] != '\r') ++m_p;
            else if (c == '\\' && m_p + 1 < m_t.size() && (m_t[m_p + 1] == '\n' || m_t[m_p + 1] == '\r')) m_p += 2;
            else if ((c == '\n' || c == '\r') && (in_brackets || m_depth == 0)) ++m_p;
            else break;
        }
    }
    bool eat(char c) {
        skip(m_depth > 0);
        if (m_p < m_t.size() && m_t[m_p] == c) {
            ++m_p;
            return true;
        }
        return false;
    }
    Py expr() {
        Py v = unary();
        // a complex number: 1+2j, the only binary operator literal_eval takes
        skip(m_depth > 0);
        if (m_p < m_t.size() && (m_t[m_p] == '+' || m_t[m_p] == '-') && v.kind == Py::number) {
            ++m_p;
            Py r = unary();
            if (r.kind != Py::number) throw Refused{};
            v.integer = false;
        }
        return v;
    }
    Py unary() {
        skip(m_depth > 0);
        if (m_p < m_t.size() && (m_t[m_p] == '+' || m_t[m_p] == '-')) {
            ++m_p;
            Py v = unary();
            if (v.kind != Py::number && v.kind != Py::boolean) throw Refused{};
            return v;
        }
        return atom();
    }
    Py sequence(char close, Py::Kind kind) {
        ++m_depth;
        Py v;
        v.kind = kind;
        bool comma = false;
        while (!eat(close)) {
            if (!v.items.empty() && !comma) throw Refused{};
            v.items.push_back(expr());
            comma = eat(',');
        }
        --m_depth;
        if (kind == Py::tuple && v.items.size() == 1 && !comma) return v.items[0];  // (x) is x
        return v;
    }
    Py atom() {
        skip(m_depth > 0);
        if (m_p >= m_t.size()) throw Refused{};
        char c = m_t[m_p];
        if (c == '(') return ++m_p, sequence(')', Py::tuple);
        if (c == '[') return ++m_p, sequence(']', Py::list);
        if (c == '{') {
            ++m_p;
            ++m_depth;
            Py v;
            v.kind = Py::dict;
            if (eat('}')) return --m_depth, v;
            Py first = expr();
            if (eat(':')) {
                v.items.push_back(first);
                v.items.push_back(expr());
                while (eat(',')) {
                    if (eat('}')) return --m_depth, v;
                    v.items.push_back(expr());
                    if (!eat(':')) throw Refused{};
                    v.items.push_back(expr());
                }
            } else {
                v.kind = Py::set;
                v.items.push_back(first);
                while (eat(',')) {
                    if (eat('}')) return --m_depth, v;
                    v.items.push_back(expr());
                }
            }
            if (!eat('}')) throw Refused{};
            --m_depth;
            return v;
        }
        if (std::isdigit(static_cast<unsigned char>(c)) || (c == '.' && m_p + 1 < m_t.size() && std::isdigit(static_cast<unsigned char>(m_t[m_p + 1]))))
            return number();
        if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
            size_t b = m_p;
            while (m_p < m_t.size() && (std::isalnum(static_cast<unsigned char>(m_t[m_p])) || m_t[m_p] == '_')) ++m_p;
            std::string_view word = m_t.substr(b, m_p - b);
            if (m_p < m_t.size() && (m_t[m_p] == '\'' || m_t[m_p] == '"')) {
                std::string lowered;
                for (char ch : word) lowered += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
                if (lowered == "r" || lowered == "u" || lowered == "b" || lowered == "br" || lowered == "rb")
                    return strings(lowered.find('b') != std::string::npos, lowered.find('r') != std::string::npos);
                throw Refused{};  // f-strings and the rest are no literals
            }
            Py v;
            if (word == "True" || word == "False") v.kind = Py::boolean, v.integer = true;
            else if (word == "None") v.kind = Py::none;
            else throw Refused{};
            return v;
        }
        if (c == '\'' || c == '"') return strings(false, false);
        if (m_t.substr(m_p, 3) == "...") throw Unsure{};
        throw Refused{};
    }
    Py number() {
        size_t b = m_p;
        bool is_int = true;
        auto digits = [&](auto ok) {
            while (m_p < m_t.size() && (ok(m_t[m_p]) || m_t[m_p] == '_')) ++m_p;
        };
        if (m_t[m_p] == '0' && m_p + 1 < m_t.size() && std::strchr("xXoObB", m_t[m_p + 1])) {
            m_p += 2;
            digits([](char ch) { return std::isxdigit(static_cast<unsigned char>(ch)) != 0; });
        } else {
            digits([](char ch) { return std::isdigit(static_cast<unsigned char>(ch)) != 0; });
            if (m_p < m_t.size() && m_t[m_p] == '.') {
                is_int = false;
                ++m_p;
                digits([](char ch) { return std::isdigit(static_cast<unsigned char>(ch)) != 0; });
            }
            if (m_p < m_t.size() && (m_t[m_p] == 'e' || m_t[m_p] == 'E')) {
                is_int = false;
                ++m_p;
                if (m_p < m_t.size() && (m_t[m_p] == '+' || m_t[m_p] == '-')) ++m_p;
                digits([](char ch) { return std::isdigit(static_cast<unsigned char>(ch)) != 0; });
            }
            if (m_p < m_t.size() && (m_t[m_p] == 'j' || m_t[m_p] == 'J')) is_int = false, ++m_p;
        }
        if (m_long && m_p < m_t.size() && m_t[m_p] == 'L') ++m_p;  // numpy 1.x's _filter_header
        if (m_p < m_t.size() && (std::isalnum(static_cast<unsigned char>(m_t[m_p])) || m_t[m_p] == '_')) throw Unsure{};
        Py v;
        v.kind = Py::number;
        v.integer = is_int;
        v.s = std::string(m_t.substr(b, m_p - b));
        return v;
    }
    // One string literal, then those implicitly joined to it.
    Py strings(bool is_bytes, bool raw) {
        Py v;
        v.kind = is_bytes ? Py::bytes : Py::str;
        for (bool first = true;; first = false) {
            if (!first) {
                size_t save = m_p;
                skip(m_depth > 0);
                size_t b = m_p;
                while (m_p < m_t.size() && std::isalpha(static_cast<unsigned char>(m_t[m_p]))) ++m_p;
                std::string prefix;
                for (char ch : m_t.substr(b, m_p - b)) prefix += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
                if (m_p >= m_t.size() || (m_t[m_p] != '\'' && m_t[m_p] != '"') ||
                    !(prefix.empty() || prefix == "r" || prefix == "u" || prefix == "b" || prefix == "br" || prefix == "rb")) {
                    m_p = save;
                    return v;
                }
                if ((prefix.find('b') != std::string::npos) != is_bytes) throw Refused{};  // str and bytes do not join
                raw = prefix.find('r') != std::string::npos;
            }
            char q = m_t[m_p];
            bool triple = m_t.substr(m_p, 3) == std::string(3, q);
            m_p += triple ? 3 : 1;
            while (true) {
                if (m_p >= m_t.size()) throw Refused{};
                char ch = m_t[m_p];
                if (ch == q && (!triple || m_t.substr(m_p, 3) == std::string(3, q))) {
                    m_p += triple ? 3 : 1;
                    break;
                }
                if ((ch == '\n' || ch == '\r') && !triple) throw Refused{};
                if (ch == '\\' && m_p + 1 < m_t.size()) {
                    char e = m_t[m_p + 1];
                    if (raw) {
                        v.s += ch;
                        v.s += e;
                        m_p += 2;
                        continue;
                    }
                    m_p += 2;
                    switch (e) {
                        case '\n': break;
                        case '\\': case '\'': case '"': v.s += e; break;
                        case 'a': v.s += '\a'; break;
                        case 'b': v.s += '\b'; break;
                        case 'f': v.s += '\f'; break;
                        case 'n': v.s += '\n'; break;
                        case 'r': v.s += '\r'; break;
                        case 't': v.s += '\t'; break;
                        case 'v': v.s += '\v'; break;
                        case 'x': v.s += code(2, 16); break;
                        case 'u': if (is_bytes) { v.s += "\\u"; break; } v.s += code(4, 16); break;
                        case 'U': if (is_bytes) { v.s += "\\U"; break; } v.s += code(8, 16); break;
                        case 'N': if (is_bytes) { v.s += "\\N"; break; } throw Unsure{};  // a character by its Unicode name
                        default:
                            if (e >= '0' && e <= '7') {
                                --m_p;
                                v.s += code(3, 8, true);
                            } else {
                                v.s += '\\';
                                v.s += e;
                            }
                    }
                    continue;
                }
                v.s += ch;
                ++m_p;
            }
        }
    }
    // \xhh, \uhhhh, \Uhhhhhhhh, \ooo: the character, as UTF-8 (only ASCII matters to a dtype).
    std::string code(int n, int base, bool upto = false) {
        uint32_t c = 0;
        int k = 0;
        for (; k < n && m_p < m_t.size(); ++k, ++m_p) {
            char ch = m_t[m_p];
            int d = std::isdigit(static_cast<unsigned char>(ch)) ? ch - '0'
                    : base == 16 && std::isxdigit(static_cast<unsigned char>(ch)) ? std::tolower(ch) - 'a' + 10 : -1;
            if (d < 0 || d >= base) break;
            c = c * static_cast<uint32_t>(base) + static_cast<uint32_t>(d);
        }
        if (k == 0 || (!upto && k < n)) throw Refused{};
        if (c < 0x80) return std::string(1, static_cast<char>(c));
        return "\x01";  // a non-ASCII character: no dtype letter
    }

    std::string_view m_t;
    bool m_long;
    size_t m_p = 0;
    int m_depth = 0;
};

using Objects = NpyHeader::Objects;

Objects either(Objects a, Objects b) {
    if (a == Objects::yes || b == Objects::yes) return Objects::yes;
    if (a == Objects::maybe || b == Objects::maybe) return Objects::maybe;
    return Objects::no;
}

// A dtype given as text: 'O', '|O8', 'object', 'i4,O', '(2,)O' … (numpy.dtype(str)). numpy 2's 'T'
// (StringDType) holds objects too. A spelling with an O or a T that is not one of the known forms
// may still be one numpy takes: unsure.
Objects text_objects(const std::string& s) {
    bool letter = s.find('O') != std::string::npos || s.find('T') != std::string::npos || s.find("object") != std::string::npos;
    if (!letter) return Objects::no;
    static const std::set<std::string> k_plain = {"O", "|O", "<O", ">O", "=O", "O8", "O4", "|O8", "<O8", ">O8", "=O8",
                                                  "|O4", "<O4", ">O4", "=O4", "object", "object_", "object0", "T", "|T", "<T", ">T", "=T"};
    if (k_plain.count(s)) return Objects::yes;
    // A comma list (commas inside a subarray's parentheses split nothing), each part with an optional
    // byte order and subarray prefix ('(2,)O', '2O'): any part that is a plain object spelling.
    Objects out = Objects::maybe;
    std::vector<std::string> parts(1);
    int depth = 0;
    for (char c : s) {
        depth += c == '(' ? 1 : c == ')' ? -1 : 0;
        if (c == ',' && depth == 0) parts.emplace_back();
        else parts.back() += c;
    }
    for (std::string part : parts) {
        while (!part.empty() && part.back() == ' ') part.pop_back();
        size_t b = part.find_first_not_of("<>|=");
        std::string rest = b == std::string::npos ? "" : part.substr(b);
        size_t shape = rest.find(')');
        if (!rest.empty() && rest[0] == '(' && shape != std::string::npos) rest = rest.substr(shape + 1);
        else while (!rest.empty() && std::isdigit(static_cast<unsigned char>(rest[0]))) rest.erase(0, 1);
        if (rest == "O" || rest == "O8" || rest == "O4" || rest == "object") out = Objects::yes;
    }
    return out;
}

// descr_to_dtype: text; a (dtype, shape) tuple; anything else iterated as fields — a field a
// (name, dtype[, shape]) pair or triple, or a 2-character string (name, dtype letter).
Objects descr_objects(const Py& d, int depth = 0) {
    if (depth > 32) return Objects::maybe;
    switch (d.kind) {
        case Py::str: return text_objects(d.s);
        case Py::tuple: return d.items.size() >= 2 ? descr_objects(d.items[0], depth + 1) : Objects::maybe;
        case Py::list: case Py::dict: case Py::set: {
            Objects out = Objects::no;
            for (size_t i = 0; i < d.items.size(); i += d.kind == Py::dict ? 2 : 1) {
                const Py& f = d.items[i];
                if (f.kind == Py::str && f.s.size() == 2) out = either(out, text_objects(f.s.substr(1)));
                else if ((f.kind == Py::tuple || f.kind == Py::list) && f.items.size() >= 2) out = either(out, descr_objects(f.items[1], depth + 1));
                else if (f.kind == Py::str) out = either(out, text_objects(f.s) == Objects::no ? Objects::no : Objects::maybe);
                else out = either(out, Objects::maybe);
            }
            return out;
        }
        case Py::bytes: return Objects::no;  // numpy refuses a bytes descr
        default: return Objects::maybe;
    }
}

}  // namespace

NpyHeader read_npy_header(ByteView b) {
    NpyHeader h;
    if (b.size < 10) {
        h.problem = "an .npy header cut short";
        return h;
    }
    uint8_t major = b.data[6], minor = b.data[7];
    if (minor != 0 || major < 1 || major > 3) {
        h.problem = "format version " + std::to_string(major) + "." + std::to_string(minor) + ", which numpy refuses";
        return h;
    }
    uint64_t len_size = major == 1 ? 2 : 4;
    if (b.size < 8 + len_size) {
        h.problem = "an .npy header cut short";
        return h;
    }
    uint64_t len = load_le(b.data + 8, static_cast<int>(len_size));
    if (len > b.size - 8 - len_size) {
        h.problem = "an .npy header longer than the file";
        return h;
    }
    h.data = 8 + len_size + len;
    std::string_view text(reinterpret_cast<const char*>(b.data + 8 + len_size), len);
    if (text.find('\0') != std::string_view::npos) {
        h.problem = "a NUL in the .npy header";
        return h;
    }
    try {
        Py d = Literal(text, major <= 2).parse();
        if (d.kind != Py::dict) throw Refused{};
        const Py *descr = nullptr, *shape = nullptr, *fortran = nullptr;
        std::set<std::string> keys;
        for (size_t i = 0; i + 1 < d.items.size(); i += 2) {
            if (d.items[i].kind != Py::str) throw Refused{};
            const std::string& k = d.items[i].s;
            keys.insert(k);
            if (k == "descr") descr = &d.items[i + 1];  // a repeated key: the last one counts
            if (k == "shape") shape = &d.items[i + 1];
            if (k == "fortran_order") fortran = &d.items[i + 1];
        }
        if (keys != std::set<std::string>{"descr", "fortran_order", "shape"}) {
            h.problem = "an .npy header whose keys are not descr, fortran_order and shape";
            return h;
        }
        if (shape->kind != Py::tuple || fortran->kind != Py::boolean) {
            h.problem = "an .npy header with a shape that is no tuple or a fortran_order that is no bool";
            return h;
        }
        for (const Py& n : shape->items)
            if (!n.integer) {
                h.problem = "an .npy header with a shape that is not all ints";
                return h;
            }
        h.valid = true;
        h.descr = descr->kind == Py::str ? "'" + descr->s + "'" : "a structured dtype";
        h.objects = descr_objects(*descr);
    } catch (const Refused&) {
        h.problem = "an .npy header that is no Python literal numpy reads";
    } catch (const Unsure&) {
        h.valid = true;
        h.objects = Objects::maybe;
        h.descr = "a spelling not decided here";
    }
    return h;
}

}  // namespace ckpt
