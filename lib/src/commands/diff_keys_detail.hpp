// What diff_keys.cpp (the comparison) and diff_keys_render.cpp (its reports) both need.
#pragma once

#include <string>
#include <string_view>

#include "base/text_util.hpp"

namespace ckpt::detail {

// The new name of a key under a fix, made in `out`: no string of its own per key and prefix pair.
inline std::string_view fixed_name(std::string& out, std::string_view k, const std::string& strip, const std::string& add) {
    if (!strip.empty() && text::starts_with(k, strip)) k.remove_prefix(strip.size());
    out.assign(add).append(k);
    return out;
}

// The module a key belongs to: all but its last part ("" for a key of one part).
inline std::string_view module_of(std::string_view key) {
    size_t dot = key.rfind('.');
    return dot == std::string_view::npos ? std::string_view() : key.substr(0, dot);
}

}  // namespace ckpt::detail
