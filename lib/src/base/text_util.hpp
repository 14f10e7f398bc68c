// Small string helpers the library's files share (one copy each, not one per file).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ckpt::text {

inline bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
inline bool ends_with(std::string_view s, std::string_view p) {
    return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}
// A hexadecimal digit's value, -1 for any other character.
inline int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}
// "a/b/c.pt" → "c.pt"; "c.pt" → "c.pt".
inline std::string base_name(const std::string& path) {
    size_t slash = path.rfind('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}
// "a/b/c.pt" → "a/b"; "c.pt" → "."; "/c.pt" → "/".
inline std::string parent_dir(const std::string& path) {
    size_t slash = path.rfind('/');
    if (slash == std::string::npos) return ".";
    if (slash == 0) return "/";
    return path.substr(0, slash);
}

// A CRC-32 as zip tools print it: "0x0a1b2c3d".
inline std::string hex32(uint32_t v) {
    static const char digits[] = "0123456789abcdef";
    std::string out = "0x00000000";
    for (int i = 9; i >= 2; --i, v >>= 4) out[static_cast<size_t>(i)] = digits[v & 0xf];
    return out;
}

}  // namespace ckpt::text
