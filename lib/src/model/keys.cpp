#include "model/keys.hpp"

#include <algorithm>

#include "ckpt/checkpoint.hpp"

namespace ckpt {

namespace {
bool all_start_with(const std::vector<std::string_view>& keys, size_t from, std::string_view p) {
    for (std::string_view k : keys)
        if (k.size() < from + p.size() || k.compare(from, p.size(), p) != 0) return false;
    return true;
}
}  // namespace

std::string wrapper_prefix(const std::vector<std::string_view>& keys) {
    if (keys.empty()) return "";
    std::string prefix;
    while (true) {
        bool progressed = false;
        for (std::string_view p : {std::string_view("module."), std::string_view("_orig_mod.")}) {
            if (all_start_with(keys, prefix.size(), p)) {
                prefix += p;
                progressed = true;
            }
        }
        if (!progressed) return prefix;
    }
}

std::string common_leading_component(const std::vector<std::string_view>& keys) {
    if (keys.size() < 2) return "";
    size_t dot = keys.front().find('.');
    if (dot == std::string_view::npos) return "";
    std::string_view first = keys.front().substr(0, dot + 1);
    return all_start_with(keys, 0, first) ? std::string(first) : "";
}

bool glob_match(std::string_view p, std::string_view t) {
    size_t pi = 0, ti = 0, star = std::string_view::npos, mark = 0;
    while (ti < t.size()) {
        if (pi < p.size() && p[pi] == '[') {
            size_t close = p.find(']', pi + 1);
            if (close != std::string_view::npos) {
                std::string_view set = p.substr(pi + 1, close - pi - 1);
                bool negate = !set.empty() && (set[0] == '!' || set[0] == '^');
                if (negate) set.remove_prefix(1);
                bool hit = false;
                for (size_t k = 0; k < set.size(); ++k) {
                    if (k + 2 < set.size() && set[k + 1] == '-') {
                        hit = hit || (t[ti] >= set[k] && t[ti] <= set[k + 2]);
                        k += 2;
                    } else {
                        hit = hit || t[ti] == set[k];
                    }
                }
                if (hit != negate) {
                    pi = close + 1;
                    ++ti;
                    continue;
                }
            } else if (t[ti] == '[') {  // an unclosed '[' is a plain character
                ++pi;
                ++ti;
                continue;
            }
        } else if (pi < p.size() && (p[pi] == '?' || p[pi] == t[ti])) {
            ++pi;
            ++ti;
            continue;
        }
        if (pi < p.size() && p[pi] == '*') {
            star = pi++;
            mark = ti;
            continue;
        }
        if (star != std::string_view::npos) {
            pi = star + 1;
            ti = ++mark;
            continue;
        }
        return false;
    }
    while (pi < p.size() && p[pi] == '*') ++pi;
    return pi == p.size();
}

bool any_glob_matches(const std::vector<std::string>& patterns, std::string_view text) {
    for (const auto& p : patterns)
        if (glob_match(p, text)) return true;
    return false;
}

bool key_selected(const std::vector<std::string>& only, const std::vector<std::string>& ignore, std::string_view key) {
    return (only.empty() || any_glob_matches(only, key)) && !any_glob_matches(ignore, key);
}

std::vector<OtherStateDict> other_state_dicts(const Checkpoint& c,
                                              const std::function<bool(const std::vector<std::string_view>&)>& carries) {
    std::vector<OtherStateDict> out;
    const StateDict& sd = c.state_dict();
    const Value* root = c.root();
    if (sd.kind != StateDictKind::dict || sd.path.empty() || !root || root->kind != ValueKind::dict || root->get(sd.path) != sd.value)
        return out;
    for (size_t i = 0; i < root->dict_size(); ++i) {
        const Value* v = root->dict_value(i);
        if (root->dict_key(i)->kind != ValueKind::string || v == sd.value || v->kind != ValueKind::dict ||
            std::any_of(out.begin(), out.end(), [&](const OtherStateDict& o) { return o.dict == v; }))  // one dict at two keys: once
            continue;
        std::vector<std::string_view> keys;
        bool tensors = false;
        for (size_t k = 0; k < v->dict_size(); ++k) {
            if (v->dict_key(k)->kind == ValueKind::string) keys.push_back(v->dict_key(k)->s());
            tensors = tensors || v->dict_value(k)->kind == ValueKind::tensor;
        }
        if (tensors && !keys.empty() && carries(keys)) out.push_back({std::string(root->dict_key(i)->s()), v, std::move(keys)});
    }
    return out;
}

}  // namespace ckpt
