// diff-keys' report as JSON, text (keys grouped by module) and GitHub annotations.
#include <cctype>
#include <ostream>
#include <string>
#include <unordered_set>

#include "ckpt/diff_keys.hpp"
#include "ckpt/report.hpp"
#include "commands/diff_keys_detail.hpp"

namespace ckpt {

using detail::fixed_name;
using detail::module_of;

nlohmann::json to_json(const KeyDiff& d) {
    nlohmann::json j = report_head("diff-keys");
    j["file"] = d.file;
    j["reference"] = d.reference;
    j["match"] = d.match();
    j["strict_dtype"] = d.strict_dtype;
    j["counts"] = {{"keys", d.keys},
                   {"reference_keys", d.reference_keys},
                   {"matched", d.matched},
                   {"missing", d.missing.size()},
                   {"unexpected", d.unexpected.size()},
                   {"shape_mismatch", d.shape_mismatch.size()},
                   {"dtype_mismatch", d.dtype_mismatch.size()},
                   {"ignored", d.ignored},
                   {"reference_ignored", d.reference_ignored}};
    j["missing"] = d.missing;
    j["unexpected"] = d.unexpected;
    auto shapes_json = [](const std::vector<ShapeMismatch>& rows) {
        nlohmann::json shapes = nlohmann::json::array();
        for (const auto& s : rows) shapes.push_back({{"key", s.key}, {"shape", s.shape}, {"reference_shape", s.reference_shape}});
        return shapes;
    };
    j["shape_mismatch"] = shapes_json(d.shape_mismatch);
    j["shape_hint"] = d.shape_hint.empty() ? nlohmann::json(nullptr) : nlohmann::json(d.shape_hint);
    nlohmann::json dtypes = nlohmann::json::array();
    for (const auto& s : d.dtype_mismatch)
        dtypes.push_back({{"key", s.key}, {"dtype", s.dtype}, {"reference_dtype", s.reference_dtype}});
    j["dtype_mismatch"] = std::move(dtypes);
    if (d.prefix_fix) {
        const PrefixFix& f = *d.prefix_fix;
        j["prefix_fix"] = {{"strip", f.strip},
                           {"add", f.add},
                           {"command", f.command.empty() ? nlohmann::json(nullptr) : nlohmann::json(f.command)},
                           {"complete", f.complete()},
                           {"matched", f.matched},
                           {"missing", f.missing},
                           {"unexpected", f.unexpected},
                           {"shape_mismatch", f.shape_mismatch},
                           {"residue", {{"missing", f.residue_missing},
                                        {"unexpected", f.residue_unexpected},
                                        {"shape_mismatch", shapes_json(f.residue_shape)}}}};
    } else {
        j["prefix_fix"] = nullptr;
    }
    return j;
}

std::vector<std::string> grouped_keys(const std::vector<std::string>& keys) {
    // Runs of keys of one module, then runs of such groups whose modules are numbered in a row
    // (base.N, base.N+1 …) with the same leaves.
    struct Group {
        std::string_view module;
        std::vector<std::string_view> leaves;
        std::string_view base;  // the module without its number ("layers."), when it ends in one
        long number = -1;
        long last = -1;  // the last number merged in
    };
    std::vector<Group> groups;
    for (const std::string& k : keys) {
        std::string_view m = module_of(k), leaf = m.empty() ? std::string_view(k) : std::string_view(k).substr(m.size() + 1);
        if (!groups.empty() && !m.empty() && groups.back().module == m) {
            groups.back().leaves.push_back(leaf);
            continue;
        }
        Group g{m, {leaf}, {}, -1, -1};
        size_t digits = m.size();
        while (digits > 0 && std::isdigit(static_cast<unsigned char>(m[digits - 1]))) --digits;
        if (digits < m.size() && digits > 0 && m[digits - 1] == '.' && m.size() - digits < 10 && (m[digits] != '0' || digits + 1 == m.size())) {
            g.base = m.substr(0, digits);
            g.number = g.last = std::stol(std::string(m.substr(digits)));
        }
        groups.push_back(std::move(g));
    }
    std::vector<Group> merged;
    for (Group& g : groups) {
        if (!merged.empty()) {
            Group& p = merged.back();
            if (g.number >= 0 && p.number >= 0 && g.base == p.base && g.number == p.last + 1 && g.leaves == p.leaves) {
                p.last = g.number;
                continue;
            }
        }
        merged.push_back(std::move(g));
    }
    std::vector<std::string> out;
    for (const Group& g : merged) {
        bool range = g.last != g.number;
        std::string name = range ? std::string(g.base) + std::to_string(g.number) + "–" + std::to_string(g.last) : std::string(g.module);
        if (g.leaves.size() == 1) {
            out.push_back(name.empty() ? std::string(g.leaves.front()) : name + "." + std::string(g.leaves.front()));
            continue;
        }
        std::string leaves;
        for (size_t i = 0; i < g.leaves.size() && i < 5; ++i) leaves += (i ? ", " : "") + std::string(g.leaves[i]);
        if (g.leaves.size() > 5) leaves += ", …";
        out.push_back(name + " (" + std::to_string(g.leaves.size()) + (range ? " keys each: " : " keys: ") + leaves + ")");
    }
    return out;
}

namespace {
// "stripping "module." on ddp.pth's keys makes all 16 keys match", as text and annotations say it.
std::string fix_text(const KeyDiff& d, const PrefixFix& f) {
    std::string how;
    if (!f.strip.empty()) how = "stripping \"" + f.strip + "\"";
    if (!f.add.empty()) how += std::string(how.empty() ? "adding" : " and adding") + " \"" + f.add + "\"";
    how += " on " + d.file + "'s keys ";
    if (f.complete()) return how + "makes all " + std::to_string(f.matched) + " keys match";
    return how + "makes " + std::to_string(f.matched) + " of " + std::to_string(d.reference_keys) + " match (" +
           std::to_string(f.missing) + " still missing, " + std::to_string(f.unexpected) + " unexpected, " +
           std::to_string(f.shape_mismatch) + (f.shape_mismatch == 1 ? " shape mismatch" : " shape mismatches") + ")";
}
}  // namespace

void render_text(const KeyDiff& d, std::ostream& out, const TextStyle& style, const DiffTextOptions& options) {
    Paint paint{style.color};
    auto plural = [](size_t n, const char* one, const char* many) {
        return std::to_string(n) + " " + (n == 1 ? one : many);
    };
    out << paint("1", d.file) << " vs " << paint("1", d.reference) << ": ";
    if (d.match()) {
        out << paint("32", "keys match") << " — " << plural(d.keys, "key", "keys") << ", shapes agree";
    } else {
        out << paint("31", "keys differ") << " — " << d.matched << " of " << d.reference_keys
            << " reference keys present";
        std::vector<std::string> parts;
        if (!d.missing.empty()) parts.push_back(std::to_string(d.missing.size()) + " missing");
        if (!d.unexpected.empty()) parts.push_back(std::to_string(d.unexpected.size()) + " unexpected");
        if (!d.shape_mismatch.empty()) parts.push_back(plural(d.shape_mismatch.size(), "shape mismatch", "shape mismatches"));
        if (d.strict_dtype && !d.dtype_mismatch.empty()) parts.push_back(plural(d.dtype_mismatch.size(), "dtype mismatch", "dtype mismatches"));
        for (size_t i = 0; i < parts.size(); ++i) out << (i ? ", " : ": ") << parts[i];
    }
    if (d.ignored || d.reference_ignored)
        out << " (" << d.ignored << " + " << d.reference_ignored << " ignored)";
    out << "\n";
    if (!d.strict_dtype && !d.dtype_mismatch.empty())
        out << "note: " << plural(d.dtype_mismatch.size(), "dtype differs", "dtypes differ")
            << " (load_state_dict casts them; --strict-dtype counts them as a mismatch)\n";
    if (d.prefix_fix) {
        const PrefixFix& f = *d.prefix_fix;
        out << paint("33", "fix:") << " " << shown(fix_text(d, f));
        out << (f.command.empty() ? "\n" : ":\n  " + paint("1", f.command) + "\n");
    }
    // Keys grouped by module (every key on its line with --all), 20 lines at most a list.
    size_t limit = options.all ? SIZE_MAX : 20;
    auto list = [&](const std::string& title, const std::vector<std::string>& keys, bool group, const char* color) {
        if (keys.empty()) return;
        std::vector<std::string> rows = group && !options.all ? grouped_keys(keys) : keys;
        out << shown(title) << " (" << keys.size() << "):\n";
        for (size_t i = 0; i < rows.size() && i < limit; ++i) out << "  " << paint(color, rows[i]) << "\n";
        if (rows.size() > limit) out << "  … " << rows.size() - limit << " more (--all lists them)\n";
    };
    auto shape_rows = [](const std::vector<ShapeMismatch>& shapes) {
        std::vector<std::string> rows;
        for (const auto& s : shapes)
            rows.push_back(s.key + ": " + shape_text(s.shape) + " vs " + shape_text(s.reference_shape) + " in the reference");
        return rows;
    };
    if (d.prefix_fix && !options.all) {
        // The lists as they are differ by the prefix; what the fix leaves is the real problem.
        const PrefixFix& f = *d.prefix_fix;
        list("after the fix, missing: in " + d.reference + ", not in " + d.file, f.residue_missing, true, "31");
        list("after the fix, unexpected: in " + d.file + ", not in " + d.reference, f.residue_unexpected, true, "33");
        list("after the fix, shape mismatch", shape_rows(f.residue_shape), false, "31");
        size_t explained = d.missing.size() + d.unexpected.size() - f.residue_missing.size() - f.residue_unexpected.size();
        if (explained)
            out << paint("2", "(" + std::string(f.residue_missing.empty() && f.residue_unexpected.empty() && f.residue_shape.empty() ? "the " : "the other ") +
                                  plural(explained, "missing or unexpected key differs", "missing and unexpected keys differ") +
                                  " by the prefix alone; --all lists every key as it is)")
                << "\n";
    } else {
        list("missing: in " + d.reference + ", not in " + d.file, d.missing, true, "31");
        list("unexpected: in " + d.file + ", not in " + d.reference, d.unexpected, true, "33");
        list("shape mismatch", shape_rows(d.shape_mismatch), false, "31");
        if (d.prefix_fix) {
            const PrefixFix& f = *d.prefix_fix;
            list("after the fix, missing", f.residue_missing, false, "31");
            list("after the fix, unexpected", f.residue_unexpected, false, "33");
            list("after the fix, shape mismatch", shape_rows(f.residue_shape), false, "31");
        }
    }
    if (!d.shape_hint.empty()) out << paint("33", "hint:") << " " << shown(d.shape_hint) << "\n";
    std::vector<std::string> rows;
    for (const auto& s : d.dtype_mismatch) rows.push_back(s.key + ": " + s.dtype + " vs " + s.reference_dtype);
    list("dtype mismatch", rows, false, d.strict_dtype ? "31" : "2");
}

std::vector<Annotation> github_annotations(const KeyDiff& d) {
    std::vector<Annotation> out;
    const std::vector<std::string>* missing = &d.missing;
    const std::vector<std::string>* unexpected = &d.unexpected;
    const std::vector<ShapeMismatch>* shapes = &d.shape_mismatch;
    if (d.prefix_fix) {
        // One error for what the prefix explains: the cause, the fix, and the keys (GitHub shows ten
        // annotations a step: one per key hid the fix).
        const PrefixFix& f = *d.prefix_fix;
        // The keys the fix matches, by their names after it.
        std::unordered_set<std::string_view> left(f.residue_unexpected.begin(), f.residue_unexpected.end());
        std::vector<std::string> matched;
        std::string name;
        for (const auto& k : d.unexpected)
            if (std::string_view n = fixed_name(name, k, f.strip, f.add); !left.count(n)) matched.emplace_back(n);
        std::vector<std::string> keys = grouped_keys(matched);
        std::string listed;
        for (size_t i = 0; i < keys.size() && i < 3; ++i) listed += (i ? ", " : "") + keys[i];
        if (keys.size() > 3) listed += ", …";
        out.push_back({"error", d.file, "diff-keys: keys differ by a prefix",
                       std::to_string(matched.size()) + (matched.size() == 1 ? " key differs" : " keys differ") +
                           " only by a prefix (" + listed + "): " + fix_text(d, f) + (f.command.empty() ? "" : "; fix: " + f.command)});
        missing = &f.residue_missing;
        unexpected = &f.residue_unexpected;
        shapes = &f.residue_shape;
    }
    for (const auto& k : grouped_keys(*missing))
        out.push_back({"error", d.file, "diff-keys: missing key", k + ": in " + d.reference + ", not in " + d.file});
    for (const auto& k : grouped_keys(*unexpected))
        out.push_back({"error", d.file, "diff-keys: unexpected key", k + ": in " + d.file + ", not in " + d.reference});
    for (const auto& s : *shapes)
        out.push_back({"error", d.file, "diff-keys: shape mismatch",
                       s.key + ": " + shape_text(s.shape) + " vs " + shape_text(s.reference_shape) + " in the reference" +
                           (&s == &shapes->back() && !d.shape_hint.empty() ? " — " + d.shape_hint : "")});
    // Without --strict-dtype a dtype difference does not change the exit code (load_state_dict casts).
    for (const auto& s : d.dtype_mismatch)
        out.push_back({d.strict_dtype ? "error" : "warning", d.file, "diff-keys: dtype mismatch",
                       s.key + ": " + s.dtype + " vs " + s.reference_dtype + " in the reference"});
    return out;
}

}  // namespace ckpt
