// CPython Lib/tarfile.py (3.11–3.13): TarInfo.frombuf, nti/nts, calc_chksums, _proc_member,
// _proc_gnulong, _proc_pax, _apply_pax_info, TarFile.next (a bad header at offset 0 is ReadError, one
// later ends the member list), _getmember (the last match).
#include "scan/tar_reading.hpp"

#include <cctype>
#include <map>
#include <optional>

namespace ckpt {

namespace {

constexpr uint64_t k_block = 512;

std::string_view field(ByteView h, size_t at, size_t len) {
    return {reinterpret_cast<const char*>(h.data + at), len};
}

// nts: up to the first NUL.
std::string nts(std::string_view s) {
    size_t nul = s.find('\0');
    return std::string(nul == std::string_view::npos ? s : s.substr(0, nul));
}

// nti: base-256 when the first byte is 0x80 or 0xff, else int(nts(s).strip() or "0", 8), which also
// takes a sign, a 0o prefix and underscores between digits.
std::optional<int64_t> nti(std::string_view s) {
    uint8_t first = static_cast<uint8_t>(s[0]);
    if (first == 0x80 || first == 0xff) {
        int64_t n = 0;
        for (size_t i = 1; i < s.size(); ++i) {
            if (n > (INT64_MAX >> 8)) return std::nullopt;
            n = (n << 8) | static_cast<uint8_t>(s[i]);
        }
        return first == 0xff ? -n : n;
    }
    std::string t = nts(s);
    size_t b = 0, e = t.size();
    auto space = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
    while (b < e && space(t[b])) ++b;
    while (e > b && space(t[e - 1])) --e;
    if (b == e) return 0;
    bool neg = false;
    if (t[b] == '+' || t[b] == '-') neg = t[b++] == '-';
    if (e - b >= 2 && t[b] == '0' && (t[b + 1] == 'o' || t[b + 1] == 'O')) {
        b += 2;
        if (b < e && t[b] == '_') ++b;
    }
    if (b == e) return std::nullopt;
    int64_t n = 0;
    bool last_digit = false;
    for (size_t i = b; i < e; ++i) {
        if (t[i] == '_' && last_digit && i + 1 < e) {
            last_digit = false;
            continue;
        }
        if (t[i] < '0' || t[i] > '7' || n > (INT64_MAX >> 3)) return std::nullopt;
        n = n * 8 + (t[i] - '0');
        last_digit = true;
    }
    if (!last_digit) return std::nullopt;
    return neg ? -n : n;
}

bool checksum_ok(ByteView h) {
    auto c = nti(field(h, 148, 8));
    if (!c) return false;
    int64_t u = 256, s = 256;
    for (size_t i = 0; i < k_block; ++i) {
        if (i >= 148 && i < 156) continue;
        u += h.data[i];
        s += static_cast<int8_t>(h.data[i]);
    }
    return *c == u || *c == s;
}

struct Header {
    TarMember m;
    std::string prefix;
};

enum class HeaderState { ok, eof, bad };

HeaderState parse_header(ByteView f, uint64_t at, Header& out, std::string& why) {
    if (at >= f.size) {
        why = "the data ends";
        return HeaderState::bad;
    }
    if (f.size - at < k_block) {
        why = "a truncated header";
        return HeaderState::bad;
    }
    ByteView h{f.data + at, k_block};
    bool zeros = true;
    for (size_t i = 0; i < k_block && zeros; ++i) zeros = h.data[i] == 0;
    if (zeros) return HeaderState::eof;
    if (!checksum_ok(h)) {
        why = "a bad checksum";
        return HeaderState::bad;
    }
    for (auto [o, n] : {std::pair<size_t, size_t>{100, 8}, {108, 8}, {116, 8}, {124, 12}, {136, 12}, {329, 8}, {337, 8}})
        if (!nti(field(h, o, n))) {
            why = "an invalid number field";
            return HeaderState::bad;
        }
    TarMember& m = out.m;
    m.header = at;
    m.name = nts(field(h, 0, 100));
    m.type = static_cast<char>(h.data[156]);
    m.link = nts(field(h, 157, 100));
    int64_t size = *nti(field(h, 124, 12));
    m.size = size < 0 ? 0 : static_cast<uint64_t>(size);
    out.prefix = nts(field(h, 345, 155));
    if (m.type == '\0' && !m.name.empty() && m.name.back() == '/') m.type = '5';
    return HeaderState::ok;
}

uint64_t blocks(uint64_t n) { return (n + k_block - 1) / k_block * k_block; }

bool gnu_type(char t) { return t == 'L' || t == 'K' || t == 'S'; }
bool supported(char t) {
    return t == '0' || t == '\0' || t == '7' || t == 'S' || t == '1' || t == '2' || t == '5' || t == '6' || t == '3' ||
           t == '4' || gnu_type(t);
}

// pax records "LEN KEY=VALUE\n"; false for one tarfile refuses.
bool pax_records(std::string_view data, std::map<std::string, std::string>& out) {
    size_t at = 0;
    while (at < data.size()) {
        if (data[at] == '\0') break;
        size_t sp = data.find(' ', at);
        if (sp == std::string_view::npos || sp == at) return false;
        uint64_t len = 0;
        for (size_t i = at; i < sp; ++i) {
            if (!std::isdigit(static_cast<unsigned char>(data[i])) || len > (1u << 30)) return false;
            len = len * 10 + static_cast<uint64_t>(data[i] - '0');
        }
        if (len < sp - at + 3 || at + len > data.size()) return false;
        std::string_view rec = data.substr(sp + 1, at + len - 1 - (sp + 1));
        size_t eq = rec.find('=');
        if (eq == std::string_view::npos || eq == 0) return false;
        out[std::string(rec.substr(0, eq))] = std::string(rec.substr(eq + 1));
        at += len;
    }
    return true;
}

}  // namespace

TarReading read_tar(ByteView f) {
    TarReading t;
    std::map<std::string, std::string> global_pax;
    uint64_t at = 0;
    while (true) {
        Header h;
        std::string why;
        HeaderState s = parse_header(f, at, h, why);
        if (s == HeaderState::eof) {
            t.accepted = true;
            break;
        }
        if (s == HeaderState::bad) {
            if (at != 0) t.problem = why + " at byte " + std::to_string(at);
            break;
        }
        // Headers that describe the next member: GNU long names, pax records.
        std::map<std::string, std::string> pax = global_pax;
        std::optional<std::string> long_name, long_link;
        bool broken = false;
        while (h.m.type == 'L' || h.m.type == 'K' || h.m.type == 'x' || h.m.type == 'g' || h.m.type == 'X') {
            uint64_t data = h.m.header + k_block;
            if (data > f.size || h.m.size > f.size - data) {
                broken = true;
                why = "a long-name or pax header whose data runs past the end";
                break;
            }
            std::string_view body(reinterpret_cast<const char*>(f.data + data), h.m.size);
            if (h.m.type == 'L') long_name = nts(body);
            else if (h.m.type == 'K') long_link = nts(body);
            else {
                std::map<std::string, std::string> rec;
                if (!pax_records(body, rec)) {
                    broken = true;
                    why = "an invalid pax header";
                    break;
                }
                for (auto& [k, v] : rec) (h.m.type == 'g' ? global_pax : pax)[k] = v;
                if (h.m.type == 'g') pax = global_pax;
            }
            uint64_t next = data + blocks(h.m.size);
            Header n;
            if (parse_header(f, next, n, why) != HeaderState::ok) {
                broken = true;
                if (why.empty()) why = "no header after a long-name or pax header";
                break;
            }
            h = n;
        }
        if (broken) {
            if (at != 0) t.problem = why;
            else t.accepted = false;
            break;
        }
        TarMember m = h.m;
        if (!h.prefix.empty() && !gnu_type(m.type)) m.name = h.prefix + "/" + m.name;
        if (long_name) m.name = *long_name;
        if (long_link) m.link = *long_link;
        if (auto p = pax.find("path"); p != pax.end()) m.name = p->second;
        if (auto p = pax.find("linkpath"); p != pax.end()) m.link = p->second;
        if (auto p = pax.find("size"); p != pax.end()) {
            uint64_t n = 0;
            bool ok = !p->second.empty();
            for (char c : p->second) ok &= std::isdigit(static_cast<unsigned char>(c)) && n < (1ull << 58), n = n * 10 + static_cast<uint64_t>(c - '0');
            m.size = ok ? n : 0;
        }
        if (m.type == '5')
            while (!m.name.empty() && m.name.back() == '/') m.name.pop_back();
        m.data = m.header + k_block;
        t.accepted = true;
        uint64_t next = m.data;
        if (m.regular() || m.type == 'S' || !supported(m.type)) next += blocks(m.size);
        t.members.push_back(std::move(m));
        if (next > f.size) {
            t.problem = "member '" + t.members.back().name + "' runs past the end of the file";
            break;
        }
        at = next;
        if (t.members.size() >= 1'000'000) {
            t.problem = "more than a million members";
            break;
        }
    }
    return t;
}

size_t tar_find(const TarReading& t, std::string_view name) {
    while (!name.empty() && name.back() == '/') name.remove_suffix(1);
    for (size_t i = t.members.size(); i-- > 0;)
        if (t.members[i].name == name) return i;
    return SIZE_MAX;
}

}  // namespace ckpt
