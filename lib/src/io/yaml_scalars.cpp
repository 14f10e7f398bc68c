#include "io/yaml_scalars.hpp"

#include <vector>

#include "ckpt/error.hpp"

namespace ckpt {

namespace {

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
    return s;
}

// The line without its comment: a '#' at the start or after a blank, outside quotes.
std::string_view uncommented(std::string_view line) {
    char quote = 0;
    for (size_t i = 0; i < line.size(); ++i) {
        char ch = line[i];
        if (quote) {
            if (ch == quote) quote = 0;
        } else if (ch == '\'' || ch == '"') {
            quote = ch;
        } else if (ch == '#' && (i == 0 || line[i - 1] == ' ' || line[i - 1] == '\t')) {
            return line.substr(0, i);
        }
    }
    return line;
}

// A quoted scalar's text ('' is a quote in single quotes; \" \\ in double quotes), or the plain one.
std::string unquoted(std::string_view v) {
    if (v.size() >= 2 && (v.front() == '\'' || v.front() == '"') && v.back() == v.front()) {
        std::string out;
        char q = v.front();
        for (size_t i = 1; i + 1 < v.size(); ++i) {
            if (q == '\'' && v[i] == '\'' && i + 2 < v.size() && v[i + 1] == '\'') ++i;
            else if (q == '"' && v[i] == '\\' && i + 2 < v.size()) ++i;
            out += v[i];
        }
        return out;
    }
    return std::string(v);
}

// Where the key of "key: value" ends (its ':'), npos when the line is no mapping entry.
size_t key_end(std::string_view s) {
    char quote = 0;
    for (size_t i = 0; i < s.size(); ++i) {
        char ch = s[i];
        if (quote) {
            if (ch == quote) quote = 0;
        } else if ((ch == '\'' || ch == '"') && i == 0) {
            quote = ch;
        } else if (ch == ':' && (i + 1 == s.size() || s[i + 1] == ' ' || s[i + 1] == '\t')) {
            return i;
        }
    }
    return std::string_view::npos;
}

}  // namespace

std::map<std::string, std::string> yaml_scalars(std::string_view text, const std::string& path) {
    std::map<std::string, std::string> out;
    struct Open {
        size_t indent;
        std::string path;  // "a.b." of the mapping this key opens
    };
    std::vector<Open> stack;
    size_t skip_deeper_than = std::string_view::npos;  // inside a sequence, a block scalar, a flow collection
    size_t lines = 0;
    while (!text.empty()) {
        size_t nl = text.find('\n');
        std::string_view raw = text.substr(0, nl);
        text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
        if (++lines > 1'000'000) throw Error(ErrorKind::limit, path, "more than 1,000,000 lines: not a model's config");
        std::string_view line = uncommented(raw);
        size_t indent = 0;
        while (indent < line.size() && line[indent] == ' ') ++indent;
        std::string_view body = trim(line.substr(indent));
        if (body.empty()) continue;
        if (skip_deeper_than != std::string_view::npos) {
            if (indent > skip_deeper_than) continue;
            skip_deeper_than = std::string_view::npos;
        }
        if (indent == 0 && (body == "---" || body == "..." || body.substr(0, 4) == "--- " || body.front() == '%')) {
            stack.clear();
            continue;
        }
        while (!stack.empty() && stack.back().indent >= indent) stack.pop_back();
        if (body.front() == '-' && (body.size() == 1 || body[1] == ' ')) {  // a sequence's item
            skip_deeper_than = indent;
            continue;
        }
        size_t colon = key_end(body);
        if (colon == std::string_view::npos) continue;  // a continued plain scalar, or something else
        std::string key = unquoted(trim(body.substr(0, colon)));
        std::string_view value = trim(body.substr(colon + 1));
        std::string prefix = stack.empty() ? "" : stack.back().path;
        if (value.empty()) {
            if (stack.size() >= 64) throw Error(ErrorKind::limit, path, "mappings nested deeper than 64 levels");
            stack.push_back({indent, prefix + key + "."});
            continue;
        }
        char first = value.front();
        if (first == '|' || first == '>' || first == '[' || first == '{' || first == '&' || first == '*' || first == '!') {
            skip_deeper_than = indent;  // what follows on deeper lines belongs to it
            continue;
        }
        if (value == "null" || value == "~" || value == "Null" || value == "NULL") continue;
        out[prefix + key] = unquoted(value);
    }
    return out;
}

}  // namespace ckpt
