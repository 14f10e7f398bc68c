// GlobalPolicy: the order of the rules. The lists themselves are in global_lists.cpp.
//
//   1. torch's weights_only allow-list (exact)                        → safe
//   2. reviewed data classes and a few families of them (exact)       → benign
//   3. what runs code: an attribute walk through a dunder or to a dangerous module or function,
//      or a denied name (by dotted prefix); no allow rule lifts it    → dangerous
//   4. the user's allow rules                                         → allowed
//   5. anything else of the standard library, torch or numpy          → dangerous (gadget surface)
//   6. anything else                                                  → unknown
#include "ckpt/globals.hpp"

#include "base/text_util.hpp"

#include <cerrno>
#include <cstring>
#include <sstream>

#include "io/mapped_file.hpp"

#include "ckpt/error.hpp"
#include "pickle/global_lists.hpp"
#include "pickle/pickle_text.hpp"

namespace ckpt {

namespace lists = global_lists;

const char* global_class_name(GlobalClass c) {
    switch (c) {
        case GlobalClass::safe: return "safe";
        case GlobalClass::benign: return "benign";
        case GlobalClass::allowed: return "allowed";
        case GlobalClass::unknown: return "unknown";
        case GlobalClass::dangerous: return "dangerous";
    }
    return "unknown";
}

namespace {

struct ModuleMap { std::string_view from, to; };

// Lib/_compat_pickle.py's IMPORT_MAPPING: the Python 2 modules pickle's fix_imports renames
// (protocols 0-2, which torch.save writes).
constexpr ModuleMap k_python2_modules[] = {
    {"BaseHTTPServer", "http.server"}, {"CGIHTTPServer", "http.server"}, {"ConfigParser", "configparser"},
    {"Cookie", "http.cookies"}, {"Dialog", "tkinter.dialog"}, {"DocXMLRPCServer", "xmlrpc.server"},
    {"FileDialog", "tkinter.filedialog"}, {"HTMLParser", "html.parser"}, {"Queue", "queue"},
    {"ScrolledText", "tkinter.scrolledtext"}, {"SimpleDialog", "tkinter.simpledialog"},
    {"SimpleHTTPServer", "http.server"}, {"SimpleXMLRPCServer", "xmlrpc.server"}, {"SocketServer", "socketserver"},
    {"StringIO", "io"}, {"Tix", "tkinter.tix"}, {"Tkconstants", "tkinter.constants"}, {"Tkdnd", "tkinter.dnd"},
    {"Tkinter", "tkinter"}, {"UserDict", "collections"}, {"UserList", "collections"}, {"UserString", "collections"},
    {"__builtin__", "builtins"}, {"_abcoll", "collections.abc"}, {"_elementtree", "xml.etree.ElementTree"},
    {"_winreg", "winreg"}, {"anydbm", "dbm"}, {"cPickle", "pickle"}, {"cStringIO", "io"}, {"commands", "subprocess"},
    {"cookielib", "http.cookiejar"}, {"copy_reg", "copyreg"}, {"dbhash", "dbm.bsd"}, {"dbm", "dbm.ndbm"},
    {"dumbdbm", "dbm.dumb"}, {"dummy_thread", "_dummy_thread"}, {"exceptions", "builtins"}, {"gdbm", "dbm.gnu"},
    {"htmlentitydefs", "html.entities"}, {"httplib", "http.client"}, {"markupbase", "_markupbase"},
    {"repr", "reprlib"}, {"robotparser", "urllib.robotparser"}, {"test.test_support", "test.support"},
    {"thread", "_thread"}, {"tkColorChooser", "tkinter.colorchooser"}, {"tkCommonDialog", "tkinter.commondialog"},
    {"tkFileDialog", "tkinter.filedialog"}, {"tkFont", "tkinter.font"}, {"tkMessageBox", "tkinter.messagebox"},
    {"tkSimpleDialog", "tkinter.simpledialog"}, {"ttk", "tkinter.ttk"}, {"urllib2", "urllib.request"},
    {"urlparse", "urllib.parse"}, {"whichdb", "dbm"}, {"xmlrpclib", "xmlrpc.client"},
};

// C accelerator modules and aliases that hold the same objects as a public module: a name is judged
// by what it is, whichever module the pickle names it through.
constexpr ModuleMap k_twins[] = {
    {"__builtins__", "builtins"}, {"_codecs", "codecs"}, {"_collections", "collections"},
    {"_collections_abc", "collections.abc"}, {"_datetime", "datetime"}, {"_decimal", "decimal"},
    {"_functools", "functools"}, {"_io", "io"}, {"_operator", "operator"}, {"_pydatetime", "datetime"},
    {"_pydecimal", "decimal"}, {"_pyio", "io"}, {"_sre", "re"}, {"nt", "os"}, {"posix", "os"},
};

struct NameMap { std::string_view module, name, to_module, to_name; };
// Lib/_compat_pickle.py's NAME_MAPPING for builtins that moved (the exceptions map by module).
constexpr NameMap k_python2_names[] = {
    {"__builtin__", "basestring", "builtins", "str"}, {"__builtin__", "intern", "sys", "intern"},
    {"__builtin__", "long", "builtins", "int"}, {"__builtin__", "reduce", "functools", "reduce"},
    {"__builtin__", "unichr", "builtins", "chr"}, {"__builtin__", "unicode", "builtins", "str"},
    {"__builtin__", "xrange", "builtins", "range"}, {"exceptions", "StandardError", "builtins", "Exception"},
    {"itertools", "ifilter", "builtins", "filter"}, {"itertools", "imap", "builtins", "map"},
    {"itertools", "izip", "builtins", "zip"}, {"UserDict", "IterableUserDict", "collections", "UserDict"},
};

std::string_view mapped(std::string_view module, const ModuleMap* begin, const ModuleMap* end) {
    for (const ModuleMap* m = begin; m != end; ++m)
        if (m->from == module) return m->to;
    return module;
}

bool identifier(std::string_view s) {
    if (s.empty() || (s[0] >= '0' && s[0] <= '9')) return false;
    for (unsigned char c : s)
        if (!(c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80))
            return false;
    return true;
}

bool dunder(std::string_view p) { return p.size() > 4 && p.substr(0, 2) == "__" && p.substr(p.size() - 2) == "__"; }

std::vector<std::string_view> split(std::string_view s) {
    std::vector<std::string_view> parts;
    for (size_t at = 0;;) {
        size_t dot = s.find('.', at);
        parts.push_back(s.substr(at, dot == std::string_view::npos ? std::string_view::npos : dot - at));
        if (dot == std::string_view::npos) return parts;
        at = dot + 1;
    }
}

using text::starts_with;

// Families of reviewed names: one class or constant, no attribute walk.
const char* reviewed_family(std::string_view module, std::string_view qualname) {
    if (module == "__torch__" || starts_with(module, "__torch__."))
        return "a TorchScript class: torch.jit.load binds it to the archive's compiled code; Python has no such module";
    if (qualname.find('.') != std::string_view::npos || !identifier(qualname) || dunder(qualname)) return nullptr;
    if (module == "collections.abc") return "an abstract base class: it holds no code of the pickle's and calling it fails";
    if (module == "__future__") return "a __future__ feature flag";
    bool upper = qualname[0] >= 'A' && qualname[0] <= 'Z';
    if (module == "builtins" && upper) {
        auto ends = [&](std::string_view x) {
            return qualname.size() >= x.size() && qualname.substr(qualname.size() - x.size()) == x;
        };
        if (ends("Error") || ends("Warning") || ends("Exception") || ends("Exit") || ends("Interrupt") ||
            ends("Iteration"))
            return "an exception class: making one runs nothing";
    }
    if (!upper && (module == "torch.nn.functional" || module == "torch._C._nn"))
        return "a tensor function of torch's nn (a whole pickled model keeps its activation, F.gelu pickles as "
               "torch._C._nn.gelu)";
    if (upper && (starts_with(module, "torch.nn.modules.") || starts_with(module, "torch.optim.")))
        return "a module or optimizer class of torch's own (a whole pickled model: unpickling fills its "
               "__dict__; torch.load(weights_only=True) refuses it)";
    return nullptr;
}

}  // namespace

std::string python3_module(std::string_view module) {
    return std::string(mapped(module, std::begin(k_python2_modules), std::end(k_python2_modules)));
}

std::string canonical_module(std::string_view module) {
    std::string_view m = mapped(module, std::begin(k_python2_modules), std::end(k_python2_modules));
    return std::string(mapped(m, std::begin(k_twins), std::end(k_twins)));
}

bool importable_module_name(std::string_view module) {
    if (!pickle_text::valid_utf8(module)) return false;
    for (std::string_view part : split(module))
        if (!identifier(part)) return false;
    return true;
}

GlobalVerdict bound_method_verdict(uint64_t uses, const std::string& example) {
    return {GlobalClass::benign, "bound method",
            "getattr(obj, name) " + std::to_string(uses) + (uses == 1 ? " time" : " times") +
                ", on objects of torch's own classes and reviewed enums only (" + example + "): how pickle writes a bound method "
                "that a torch 1.x scheduler keeps, or an enum member; nothing calls it while loading",
            false};
}

const GlobalPolicy& GlobalPolicy::standard() {
    static const GlobalPolicy p;
    return p;
}

void GlobalPolicy::allow(std::string_view pattern, const std::string& source) {
    Rule r;
    r.text = std::string(pattern);
    std::string_view name = pattern;
    if (name.size() > 2 && name.substr(name.size() - 2) == ".*") {
        r.wildcard = true;
        name.remove_suffix(1);  // keep the dot: "mypkg." matches "mypkg.x", not "mypkgx"
    }
    std::string_view dotted = r.wildcard ? name.substr(0, name.size() - 1) : name;
    if (dotted.empty() || !importable_module_name(dotted) || (!r.wildcard && dotted.find('.') == std::string_view::npos))
        throw Error(ErrorKind::usage, "",
                    source + ": allow rule '" + r.text + "' is not module.Name or module.* (a dotted name)");
    r.prefix = std::string(name);
    r.text = source == "--allow" ? "--allow " + r.text : r.text + " (" + source + ")";
    m_rules.push_back(std::move(r));
}

void GlobalPolicy::allow_file(const std::string& path) {
    std::istringstream in(read_text_file(path, 16u << 20, "an allow file"));
    std::string line;
    for (size_t n = 1; std::getline(in, line); ++n) {
        size_t hash = line.find('#');
        if (hash != std::string::npos) line.erase(hash);
        size_t b = line.find_first_not_of(" \t\r"), e = line.find_last_not_of(" \t\r");
        if (b == std::string::npos) continue;
        allow(std::string_view(line).substr(b, e - b + 1), path + ":" + std::to_string(n));
    }
    if (in.bad()) throw Error(ErrorKind::io, path, std::string("cannot read the allow file: ") + std::strerror(errno));
}

GlobalVerdict GlobalPolicy::judge(std::string_view module, std::string_view qualname) const {
    // The names the unpickler resolves: as written (protocol 3+), with fix_imports' renames
    // (protocols 0-2), and read through the accelerator twins.
    std::string fixed_module = python3_module(module), name(qualname);
    for (const NameMap& m : k_python2_names)
        if (m.module == module && m.name == qualname) {
            fixed_module = std::string(m.to_module);
            name = std::string(m.to_name);
        }
    std::string canon = std::string(mapped(fixed_module, std::begin(k_twins), std::end(k_twins)));
    const std::string written = std::string(module) + "." + std::string(qualname);
    const std::string fixed = fixed_module + "." + name;
    const std::string full = canon + "." + name;

    GlobalVerdict v;
    if (lists::torch_weights_only(written) || lists::torch_weights_only(fixed)) {
        v = {GlobalClass::safe, "torch weights_only", "torch.load(weights_only=True) allows it", true};
        return v;
    }
    if (const lists::Entry* e = lists::torch_when_imported(fixed)) {
        v = {GlobalClass::safe, "torch weights_only",
             std::string(e->why) + "; torch 2.6's weights_only load allows it once its module is imported", true};
        return v;
    }
    if (const lists::Entry* e = lists::reviewed_data(full); e || (e = lists::reviewed_data(written))) {
        v = {GlobalClass::benign, "data class", std::string(e->why), false};
        return v;
    }
    if (const char* why = reviewed_family(canon, name)) {
        v = {GlobalClass::benign, "data class", why, false};
        return v;
    }

    // Rule 3: what runs code, which no allow rule lifts: a denied name, else an attribute walk.
    std::string danger, rule;
    if (const lists::Entry* e = lists::denied(full)) {
        rule = "denied: " + std::string(e->name);
        danger = std::string(e->why);
    } else {
        for (std::string_view part : split(name)) {
            bool d = dunder(part);
            if (!d && !lists::dangerous_attribute(part)) continue;
            rule = "attribute walk";
            danger = "the unpickler walks to the attribute " + std::string(part) +
                     (d ? ", which reaches Python's internals (globals, builtins, code objects) from any object"
                        : ", which runs code or reaches the system");
            break;
        }
    }
    const Rule* allowed = nullptr;
    for (const Rule& r : m_rules)
        if ((r.wildcard && (starts_with(written, r.prefix) || starts_with(full, r.prefix))) ||
            (!r.wildcard && (written == r.prefix || full == r.prefix))) {
            allowed = &r;
            break;
        }
    if (!danger.empty()) {
        if (allowed) danger += " (" + allowed->text + " does not lift that)";
        v = {GlobalClass::dangerous, rule, danger, false};
        return v;
    }
    if (allowed) {
        v = {GlobalClass::allowed, allowed->text, "allowed by " + allowed->text, false};
        return v;
    }
    std::string_view root = std::string_view(canon).substr(0, canon.find('.'));
    if (lists::stdlib_module(root) || lists::framework_module(root)) {
        v = {GlobalClass::dangerous, lists::stdlib_module(root) ? "standard library" : "framework",
             std::string(lists::stdlib_module(root) ? "a name of the standard library" : "a name of " + std::string(root)) +
                 " that is not a reviewed data class: exploits are built from such names (--allow it if it is "
                 "data you trust)",
             false};
        return v;
    }
    v = {GlobalClass::unknown, "not on any list",
         "on no allow-list (a class of your own or a third-party library's): torch.load(weights_only=True) "
         "refuses it and a plain torch.load imports and calls it; --allow it if you trust it",
         false};
    return v;
}

}  // namespace ckpt
