#include "pickle/pickle_text.hpp"
#include "base/text_util.hpp"

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <vector>

namespace ckpt::pickle_text {

namespace {

bool refuse(std::string& error, const char* why) {
    error = why;
    return false;
}

void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xc0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xe0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
        out += static_cast<char>(0xf0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        out += static_cast<char>(0x80 | (cp & 0x3f));
    }
}

}  // namespace

bool string_literal(std::string_view line, std::string& out, std::string& error) {
    if (line.size() < 2 || (line.front() != '\'' && line.front() != '"') || line.back() != line.front())
        return refuse(error, "STRING argument is not a quoted literal");
    std::string_view body = line.substr(1, line.size() - 2);
    for (size_t i = 0; i < body.size(); ++i) {
        char c = body[i];
        if (c != '\\') {
            out += c;
            continue;
        }
        if (++i >= body.size()) return refuse(error, "STRING literal ends in a backslash");
        char e = body[i];
        switch (e) {
            case 'n': out += '\n'; break;
            case 't': out += '\t'; break;
            case 'r': out += '\r'; break;
            case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7': {
                int v = 0, k = 0;
                while (k < 3 && i < body.size() && body[i] >= '0' && body[i] <= '7') {
                    v = v * 8 + (body[i] - '0');
                    ++i;
                    ++k;
                }
                --i;
                out += static_cast<char>(v & 0xff);
                break;
            }
            case 'x': {
                if (i + 2 >= body.size()) return refuse(error, "bad \\x escape");
                int h = text::hex_digit(body[i + 1]), l = text::hex_digit(body[i + 2]);
                if (h < 0 || l < 0) return refuse(error, "bad \\x escape");
                out += static_cast<char>(h * 16 + l);
                i += 2;
                break;
            }
            default: out += e; break;  // \\ \' \" and unknown escapes keep the character
        }
    }
    return true;
}

bool raw_unicode(std::string_view line, std::string& out, std::string& error) {
    for (size_t i = 0; i < line.size(); ++i) {
        unsigned char c = static_cast<unsigned char>(line[i]);
        if (c == '\\' && i + 1 < line.size() && (line[i + 1] == 'u' || line[i + 1] == 'U')) {
            size_t n = line[i + 1] == 'u' ? 4 : 8;
            if (i + 2 + n > line.size()) return refuse(error, "bad \\u escape in UNICODE");
            uint32_t cp = 0;
            for (size_t k = 0; k < n; ++k) {
                int d = text::hex_digit(line[i + 2 + k]);
                if (d < 0) return refuse(error, "bad \\u escape in UNICODE");
                cp = cp * 16 + static_cast<uint32_t>(d);
            }
            if (cp > 0x10ffff) return refuse(error, "code point out of range in UNICODE");
            append_utf8(out, cp);
            i += 1 + n;
        } else {
            append_utf8(out, c);  // raw-unicode-escape: other bytes are Latin-1
        }
    }
    return true;
}

namespace {

bool blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

int digit_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'z') return c - 'a' + 10;
    if (c >= 'A' && c <= 'Z') return c - 'A' + 10;
    return 99;
}

// int(text, 0): [blanks][sign](0x|0o|0b digits | decimal without leading zeros | zeros)[blanks],
// single underscores between digits (and after a prefix).
bool python_int(std::string_view t, Integer& out) {
    while (!t.empty() && blank(t.front())) t.remove_prefix(1);
    while (!t.empty() && blank(t.back())) t.remove_suffix(1);
    bool negative = false;
    if (!t.empty() && (t[0] == '+' || t[0] == '-')) {
        negative = t[0] == '-';
        t.remove_prefix(1);
    }
    int base = 10;
    if (t.size() >= 2 && t[0] == '0') {
        char p = static_cast<char>(t[1] | 0x20);
        base = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 10;
        if (base != 10) {
            t.remove_prefix(2);
            if (!t.empty() && t[0] == '_') t.remove_prefix(1);  // 0x_1f
        }
    }
    std::vector<int> digits;
    bool last_underscore = false;
    for (char c : t) {
        if (c == '_') {
            if (last_underscore || digits.empty()) return false;
            last_underscore = true;
            continue;
        }
        int d = digit_value(c);
        if (d >= base) return false;
        digits.push_back(d);
        last_underscore = false;
    }
    if (digits.empty() || last_underscore) return false;
    if (base == 10 && digits.size() > 1 && digits[0] == 0)
        for (int d : digits)
            if (d != 0) return false;  // "010" is no decimal literal; "000" is
    // Magnitude as little-endian bytes (multiply-add), then two's complement.
    std::vector<uint8_t> mag;
    for (int d : digits) {
        unsigned carry = static_cast<unsigned>(d);
        for (uint8_t& b : mag) {
            unsigned v = b * static_cast<unsigned>(base) + carry;
            b = static_cast<uint8_t>(v & 0xff);
            carry = v >> 8;
        }
        while (carry) {
            mag.push_back(static_cast<uint8_t>(carry & 0xff));
            carry >>= 8;
        }
    }
    while (!mag.empty() && mag.back() == 0) mag.pop_back();
    if (mag.size() <= 8) {
        uint64_t u = 0;
        for (size_t k = mag.size(); k-- > 0;) u = (u << 8) | mag[k];
        if (!negative && u <= static_cast<uint64_t>(INT64_MAX)) {
            out = {true, static_cast<int64_t>(u), {}};
            return true;
        }
        if (negative && u <= static_cast<uint64_t>(INT64_MAX) + 1) {
            out = {true, static_cast<int64_t>(0 - u), {}};
            return true;
        }
    }
    mag.push_back(0);  // room for the sign bit
    if (negative) {
        unsigned carry = 1;
        for (uint8_t& b : mag) {
            unsigned v = static_cast<uint8_t>(~b) + carry;
            b = static_cast<uint8_t>(v & 0xff);
            carry = v >> 8;
        }
        while (mag.size() > 1 && mag.back() == 0xff && (mag[mag.size() - 2] & 0x80)) mag.pop_back();
    } else {
        while (mag.size() > 1 && mag.back() == 0 && !(mag[mag.size() - 2] & 0x80)) mag.pop_back();
    }
    out.fits = false;
    out.small = 0;
    out.big.assign(mag.begin(), mag.end());
    return true;
}

}  // namespace

bool valid_utf8(std::string_view s) {
    size_t i = 0, n = s.size();
    while (i < n) {
        unsigned char c = static_cast<unsigned char>(s[i]);
        if (c < 0x80) {
            ++i;
            continue;
        }
        int len = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
        if (len == 0 || i + len > n) return false;
        for (int k = 1; k < len; ++k)
            if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return false;
        i += len;
    }
    return true;
}

bool codecs_encode(std::string_view s, std::string_view enc, std::string& out) {
    out.clear();
    if (enc == "utf-8" || enc == "utf8") {
        out = std::string(s);
        return true;
    }
    if (enc != "latin1" && enc != "latin-1" && enc != "iso-8859-1") return false;
    for (size_t i = 0; i < s.size(); ++i) {
        unsigned char ch = static_cast<unsigned char>(s[i]);
        if (ch < 0x80) {
            out += static_cast<char>(ch);
        } else if ((ch & 0xe0) == 0xc0 && i + 1 < s.size()) {
            unsigned cp = ((ch & 0x1fu) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3fu);
            if (cp > 0xff) return false;
            out += static_cast<char>(cp);
            ++i;
        } else {
            return false;
        }
    }
    return true;
}

bool int_literal(std::string_view line, Integer& out) {
    // Modules/_pickle.c load_int: strtol(s, &end, 0) must stop at the newline, else int(s, 0).
    std::string text(line);
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(text.c_str(), &end, 0);
    if (errno != ERANGE && end != text.c_str() && *end == '\0') {
        out = {true, v, {}};
        return true;
    }
    return python_int(line, out);
}

bool long_literal(std::string_view line, Integer& out) { return python_int(line, out); }

bool memo_index(std::string_view line, uint64_t& out) {
    std::string text(line);
    char* end = nullptr;
    errno = 0;
    unsigned long long v = std::strtoull(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno == ERANGE || text[0] == '-') return false;
    out = v;
    return true;
}

}  // namespace ckpt::pickle_text
