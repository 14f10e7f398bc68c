#include "ckpt/report.hpp"

#include "ckpt/error.hpp"
#include "io/mapped_file.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ostream>
#include <stdexcept>
#include <string_view>

#ifndef CKPT_VERSION
#define CKPT_VERSION "0.0.0"
#endif

namespace ckpt {

const char* tool_version() { return CKPT_VERSION; }

nlohmann::json tool_json() { return {{"name", "ckpt-tool"}, {"version", tool_version()}}; }

nlohmann::json report_head(const char* command) {
    nlohmann::json j;
    j["schema_version"] = k_schema_version;
    j["tool"] = tool_json();
    j["command"] = command;
    return j;
}

std::string human_bytes(uint64_t bytes) {
    static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    if (bytes < 1024) return std::to_string(bytes) + " B";
    double v = static_cast<double>(bytes);
    int u = 0;
    while (v >= 1024 && u < 5) {
        v /= 1024;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
    return buf;
}

std::string human_count(uint64_t n) {
    char buf[32];
    if (n < 10'000) return std::to_string(n);
    if (n < 1'000'000) std::snprintf(buf, sizeof buf, "%.1f K", n / 1e3);
    else if (n < 1'000'000'000) std::snprintf(buf, sizeof buf, "%.2f M", n / 1e6);
    else std::snprintf(buf, sizeof buf, "%.2f G", n / 1e9);
    return buf;
}



namespace {
// The length of the UTF-8 sequence at s[i] (1–4), 0 when it is not one: a stray continuation byte,
// an overlong form, a surrogate, past U+10FFFF, or cut short.
size_t utf8_length(std::string_view s, size_t i, uint32_t& cp) {
    auto b = static_cast<unsigned char>(s[i]);
    size_t n = b < 0x80 ? 1 : (b & 0xe0) == 0xc0 ? 2 : (b & 0xf0) == 0xe0 ? 3 : (b & 0xf8) == 0xf0 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return 0;
    cp = n == 1 ? b : n == 2 ? (b & 0x1fu) : n == 3 ? (b & 0x0fu) : (b & 0x07u);
    for (size_t k = 1; k < n; ++k) {
        auto c = static_cast<unsigned char>(s[i + k]);
        if ((c & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (c & 0x3fu);
    }
    static const uint32_t k_least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < k_least[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return n;
}

bool hidden(uint32_t cp) {
    return cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f) || (cp >= 0x202a && cp <= 0x202e) ||
           (cp >= 0x2066 && cp <= 0x2069) || cp == 0x200e || cp == 0x200f || cp == 0x061c;
}
}  // namespace

std::string shown(std::string_view s) {
    size_t i = 0;
    for (; i < s.size(); ++i) {
        auto b = static_cast<unsigned char>(s[i]);
        if (b < 0x20 || b >= 0x7f) break;
    }
    if (i == s.size()) return std::string(s);
    std::string out(s.substr(0, i));
    char buf[16];
    while (i < s.size()) {
        uint32_t cp = 0;
        size_t n = utf8_length(s, i, cp);
        if (n == 0) {
            std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(s[i]));
            out += buf;
            ++i;
            continue;
        }
        if (!hidden(cp)) {
            out.append(s.substr(i, n));
        } else if (cp == '\n') {
            out += "\\n";
        } else if (cp == '\r') {
            out += "\\r";
        } else if (cp == '\t') {
            out += "\\t";
        } else if (cp == 0x1b) {
            out += "\\e";
        } else if (cp < 0x80) {
            std::snprintf(buf, sizeof buf, "\\x%02x", cp);
            out += buf;
        } else {
            std::snprintf(buf, sizeof buf, "\\u%04x", cp);
            out += buf;
        }
        i += n;
    }
    return out;
}

std::string shell_quote(const std::string& s) {
    bool control = false;
    for (char ch : s) control = control || static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f;
    if (control) {  // bash's $'…': printable, and the same bytes when pasted
        std::string out = "$'";
        char buf[8];
        for (char ch : s) {
            auto b = static_cast<unsigned char>(ch);
            if (b < 0x20 || b == 0x7f) {
                std::snprintf(buf, sizeof buf, "\\x%02x", b);
                out += buf;
            } else if (ch == '\'' || ch == '\\') {
                out += '\\';
                out += ch;
            } else {
                out += ch;
            }
        }
        return out + "'";
    }
    bool plain = !s.empty();
    for (char ch : s)
        plain = plain && (isalnum(static_cast<unsigned char>(ch)) ||
                          std::string_view("._-/+=:,@").find(ch) != std::string_view::npos);
    if (plain) return s;
    std::string out = "'";
    for (char ch : s) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    return out + "'";
}

namespace {
std::string repaired_path(const std::string& path) {
    size_t slash = path.rfind('/');
    std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
    std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
    size_t dot = base.rfind('.');
    std::string stem = dot == std::string::npos || dot == 0 ? base : base.substr(0, dot);
    std::string ext = dot == std::string::npos || dot == 0 ? "" : base.substr(dot);
    return dir + stem + "_stripped" + ext;
}
}  // namespace

std::string strip_prefix_command(const std::string& file, const std::string& state_dict_path,
                                 const std::vector<std::string>& strip, const std::string& add) {
    std::string cmd = "ckpt-tool strip-prefix " + shell_quote(file);
    if (!state_dict_path.empty()) cmd += " --state-dict-key " + shell_quote(state_dict_path);
    for (const auto& p : strip) cmd += " --prefix " + shell_quote(p);
    if (!add.empty()) cmd += " --add-prefix " + shell_quote(add);
    return cmd + " -o " + shell_quote(repaired_path(file));
}

std::string github_escape(std::string_view s, bool property) {
    std::string out;
    out.reserve(s.size());
    // CR and LF as the toolkit writes them; in between, the text as shown() writes it (a log
    // renders ANSI sequences), then the toolkit's escapes of what remains.
    for (size_t at = 0; at <= s.size();) {
        size_t end = s.find_first_of("\r\n", at);
        if (end == std::string_view::npos) end = s.size();
        for (char ch : shown(s.substr(at, end - at))) {
            if (ch == '%') out += "%25";
            else if (property && ch == ':') out += "%3A";
            else if (property && ch == ',') out += "%2C";
            else out += ch;
        }
        if (end == s.size()) break;
        out += s[end] == '\r' ? "%0D" : "%0A";
        at = end + 1;
    }
    return out;
}

std::string github_command(const Annotation& a) {
    std::string cmd = "::" + a.level;
    const char* sep = " ";
    for (const auto& [name, value] : {std::pair{"file", &a.file}, std::pair{"title", &a.title}}) {
        if (value->empty()) continue;
        cmd += sep + std::string(name) + "=" + github_escape(*value, true);
        sep = ",";
    }
    return cmd + "::" + github_escape(a.message, false);
}

void render_github(const std::vector<Annotation>& annotations, const std::string& command, std::ostream& out, size_t cap) {
    auto finding = [](const Annotation& a) { return a.level == "error" || a.level == "warning"; };
    size_t errors = 0, warnings = 0, left_out = 0;
    for (size_t i = 0; i < annotations.size(); ++i) {
        errors += annotations[i].level == "error";
        warnings += annotations[i].level == "warning";
        if (i < cap) out << github_command(annotations[i]) << "\n";
        else left_out += finding(annotations[i]);
    }
    auto count = [](size_t n, const char* what) { return std::to_string(n) + " " + what + (n == 1 ? "" : "s"); };
    if (left_out) {
        std::string file = annotations[cap].file;
        for (size_t i = cap; i < annotations.size(); ++i)
            if (annotations[i].file != file) file.clear();
        out << github_command({"warning", file, "ckpt-tool: more findings",
                               count(left_out, "more finding") + " not annotated (at most " + std::to_string(cap) +
                                   " annotations a run): run ckpt-tool " + command + " with --json for all"})
            << "\n";
    }
    out << "ckpt-tool " << command << ": ";
    if (!errors && !warnings) out << "no findings";
    else out << count(errors, "error") << ", " << count(warnings, "warning");
    if (left_out) out << ", " << left_out << " not annotated (--json lists all)";
    out << "\n";
}

void append_json_row(std::string& buf, const nlohmann::json& row, int indent, bool& first) {
    buf += first ? '[' : ',';
    first = false;
    std::string text = row.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
    const std::string margin(2 * static_cast<size_t>(indent), ' ');  // an element of a member of the top level
    buf += '\n';
    buf += margin;
    size_t from = 0;
    for (size_t nl; (nl = text.find('\n', from)) != std::string::npos; from = nl + 1) {
        buf.append(text, from, nl + 1 - from);  // a line break inside a string is escaped: these are layout
        buf += margin;
    }
    buf.append(text, from, std::string::npos);
}

void write_json_streamed(const nlohmann::json& doc, int indent, const std::vector<std::pair<std::string, JsonRows>>& arrays,
                         const std::function<void(std::string_view)>& sink) {
    std::string text = doc.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
    const std::string margin(static_cast<size_t>(indent), ' ');
    // Where each array stands in the text, in the text's order (keys are sorted).
    std::vector<std::pair<size_t, const std::pair<std::string, JsonRows>*>> at;
    for (const auto& a : arrays) {
        std::string marker = "\n" + margin + "\"" + a.first + "\": []";
        size_t pos = text.find(marker);
        if (pos == std::string::npos || !doc.contains(a.first) || !doc[a.first].is_array() || !doc[a.first].empty())
            throw std::logic_error("write_json_streamed: no empty top-level array \"" + a.first + "\"");
        at.push_back({pos + marker.size() - 2, &a});  // at its "[]"
    }
    std::sort(at.begin(), at.end());
    std::string buf;
    size_t from = 0;
    for (const auto& [pos, a] : at) {
        buf.append(text, from, pos - from);
        bool first = true;
        a->second([&](const nlohmann::json& row) {
            append_json_row(buf, row, indent, first);
            if (buf.size() >= (1u << 16)) {
                sink(buf);
                buf.clear();
            }
        });
        if (first) buf += "[]";
        else buf.append("\n").append(margin).append("]");
        from = pos + 2;
    }
    buf.append(text, from, std::string::npos);
    buf += '\n';
    sink(buf);
}

}  // namespace ckpt
