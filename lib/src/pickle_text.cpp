#include "pickle_text.hpp"

#include <cstdint>

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

int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
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
                int h = hex_digit(body[i + 1]), l = hex_digit(body[i + 2]);
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
                int d = hex_digit(line[i + 2 + k]);
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

}  // namespace ckpt::pickle_text
