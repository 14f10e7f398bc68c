// Operations on key sets: wrapper prefixes, globs.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ckpt {

class Checkpoint;
struct Value;

// The wrapper prefixes torch's consume_prefix_in_state_dict_if_present would strip: "module." and
// "_orig_mod.", repeatedly and in any order, while every key carries one. Returns what all keys share
// ("module._orig_mod." …), "" when nothing (or no keys).
std::string wrapper_prefix(const std::vector<std::string_view>& keys);

// The first dotted component every key shares, with its dot ("model."), "" if none or < 2 keys.
std::string common_leading_component(const std::vector<std::string_view>& keys);

// fnmatch-style glob: '*' any run (dots included), '?' one character, '[abc]' a set.
bool glob_match(std::string_view pattern, std::string_view text);
bool any_glob_matches(const std::vector<std::string>& patterns, std::string_view text);
// Whether a key is taken: it matches one of `only` (--keys; none given takes every key) and none of
// `ignore` (--ignore).
bool key_selected(const std::vector<std::string>& only, const std::vector<std::string>& ignore, std::string_view key);

// The other state dicts beside a checkpoint's own at its top level (a training checkpoint's
// {model, ema, …}): dicts holding tensors whose string keys, all of them, pass `carries`; in file
// order, a dict at two keys once. None when the state dict is not a top-level value.
struct OtherStateDict {
    std::string name;                    // its top-level key ("ema")
    const Value* dict = nullptr;
    std::vector<std::string_view> keys;  // its string keys, in order (the checkpoint's text)
};
std::vector<OtherStateDict> other_state_dicts(const Checkpoint& c,
                                              const std::function<bool(const std::vector<std::string_view>&)>& carries);

}  // namespace ckpt
