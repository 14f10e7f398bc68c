#include "ckpt/report.hpp"

#include <cstdio>

#ifndef CKPT_VERSION
#define CKPT_VERSION "0.0.0"
#endif

namespace ckpt {

const char* tool_version() { return CKPT_VERSION; }

nlohmann::json tool_json() { return {{"name", "ckpt-tool"}, {"version", tool_version()}}; }

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

std::string shape_text(const std::vector<int64_t>& shape) {
    if (shape.empty()) return "()";
    std::string s;
    for (size_t i = 0; i < shape.size(); ++i) {
        if (i) s += "×";
        s += std::to_string(shape[i]);
    }
    return s;
}

}  // namespace ckpt
