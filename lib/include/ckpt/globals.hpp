// What a global named in a pickle is: default-deny, as torch.load(weights_only=True) is. The pickle
// VM never calls a global; this module only says what a report should make of one, and it is the one
// place that says it (scan, inspect and verify all ask it).
//
// A name is judged as the unpickler resolves it: the module (Python 2 names mapped as pickle's
// fix_imports maps them, C accelerator modules read as their public twins: posix/nt → os, _operator
// → operator, __builtin__ → builtins …), then every attribute of the dotted qualname the unpickler
// walks through (`builtins.eval.__call__`, `pathlib.os.system`).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt {

enum class GlobalClass {
    safe,       // on torch's weights_only allow-list (rebuild functions, storages, dtypes, OrderedDict …)
    benign,     // a reviewed data-only class that checkpoints carry (argparse.Namespace, numpy arrays …)
    allowed,    // matched an allow rule the user gave (--allow, --allow-file)
    unknown,    // on no list: a class of the user's or of a third-party library
    dangerous,  // runs code or reaches the system, or is gadget surface (the standard library, torch
                // and numpy outside the lists, attributes through dunders, names computed at load)
};

const char* global_class_name(GlobalClass c);
// Safe, benign or allowed: nothing to report.
inline bool global_is_known(GlobalClass c) {
    return c == GlobalClass::safe || c == GlobalClass::benign || c == GlobalClass::allowed;
}
// A finding: unknown or dangerous (exit 1 by default in scan and verify).
inline bool global_is_finding(GlobalClass c) { return !global_is_known(c); }

struct GlobalVerdict {
    GlobalClass cls = GlobalClass::unknown;
    std::string rule;    // which list or rule decided: "torch weights_only", "data class", "--allow x.*" …
    std::string reason;  // one line, why
    // torch.load(weights_only=True) of torch 2.6 accepts it (torch 1.13's list is a subset).
    bool weights_only = false;
};

// The lists, plus the rules a user adds. `standard()` has none of the user's.
class GlobalPolicy {
public:
    static const GlobalPolicy& standard();

    // `pattern`: an exact `module.qualname`, or `prefix.*` for every name under a module or package.
    // `source` says where it came from in reports ("--allow", "allow.txt:3"). Error(usage) for a
    // pattern that is not a dotted name.
    void allow(std::string_view pattern, const std::string& source);
    // One pattern a line; blank lines and `#` comments skipped. Error(io/usage) naming the file.
    void allow_file(const std::string& path);
    bool has_rules() const { return !m_rules.empty(); }

    // `module` and `qualname` as the pickle wrote them.
    GlobalVerdict judge(std::string_view module, std::string_view qualname) const;

private:
    struct Rule {
        std::string prefix;  // "mypkg.Model" (exact) or "mypkg." (wildcard)
        bool wildcard = false;
        std::string text;    // as given, for the report
    };
    std::vector<Rule> m_rules;
};

// Python 2 module names as pickle's fix_imports maps them (Lib/_compat_pickle.py's IMPORT_MAPPING:
// `__builtin__` → `builtins`, `copy_reg` → `copyreg`, `httplib` → `http.client` …).
std::string python3_module(std::string_view module);
// builtins.getattr in a pickle whose every use of it (`uses` of them) is how pickle writes a bound
// method of one of torch's own classes (`example`: "torch.optim.lr_scheduler.OneCycleLR._annealing_cos"):
// benign there. The readers count the uses (lib/src/bound_methods.hpp).
GlobalVerdict bound_method_verdict(uint64_t uses, const std::string& example);

// The module name the unpickler imports for `module` (Python 2 names mapped, accelerator modules
// read as their public twin), for judging; reports keep the name as written.
std::string canonical_module(std::string_view module);
// A module name Python can import: dotted identifiers (an unpickler fails on anything else, before it
// imports).
bool importable_module_name(std::string_view module);

}  // namespace ckpt
