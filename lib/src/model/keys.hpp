// Operations on key sets: wrapper prefixes, globs.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ckpt {

// The wrapper prefixes torch's consume_prefix_in_state_dict_if_present would strip: "module." and
// "_orig_mod.", repeatedly and in any order, while every key carries one. Returns what all keys share
// ("module._orig_mod." …), "" when nothing (or no keys).
std::string wrapper_prefix(const std::vector<std::string_view>& keys);

// The first dotted component every key shares, with its dot ("model."), "" if none or < 2 keys.
std::string common_leading_component(const std::vector<std::string_view>& keys);

// fnmatch-style glob: '*' any run (dots included), '?' one character, '[abc]' a set.
bool glob_match(std::string_view pattern, std::string_view text);
bool any_glob_matches(const std::vector<std::string>& patterns, std::string_view text);

}  // namespace ckpt
