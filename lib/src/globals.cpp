#include "ckpt/globals.hpp"

#include <string>

#include "ckpt/dtype.hpp"

namespace ckpt {

const char* global_class_name(GlobalClass c) {
    switch (c) {
        case GlobalClass::safe: return "safe";
        case GlobalClass::benign: return "benign";
        case GlobalClass::unknown: return "unknown";
        case GlobalClass::dangerous: return "dangerous";
    }
    return "unknown";
}

namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool is_module_or_sub(std::string_view module, std::string_view root) {
    return module == root || (starts_with(module, root) && module.size() > root.size() &&
                              module[root.size()] == '.');
}

struct Name { std::string_view module, name; };

// Rebuilt as data by this reader (or decoded as torch.load's weights_only unpickler would).
constexpr Name k_safe[] = {
    {"collections", "OrderedDict"},
    {"torch._utils", "_rebuild_tensor"},
    {"torch._utils", "_rebuild_tensor_v2"},
    {"torch._utils", "_rebuild_tensor_v3"},
    {"torch._utils", "_rebuild_parameter"},
    {"torch._utils", "_rebuild_parameter_with_state"},
    {"torch._utils", "_rebuild_qtensor"},
    {"torch._utils", "_rebuild_sparse_tensor"},
    {"torch._utils", "_rebuild_sparse_csr_tensor"},
    {"torch._utils", "_rebuild_meta_tensor_no_storage"},
    {"torch._utils", "_rebuild_nested_tensor"},
    {"torch._tensor", "_rebuild_from_type_v2"},
    {"torch._tensor", "_rebuild_from_type"},
    {"torch", "Size"},
    {"torch", "device"},
    {"torch", "Tensor"},
    {"torch.nn.parameter", "Parameter"},
    {"torch", "per_tensor_affine"},
    {"torch", "per_channel_affine"},
    {"torch", "strided"},
    {"torch", "sparse_coo"},
    {"builtins", "set"},
    {"builtins", "frozenset"},
    {"builtins", "bytearray"},
    {"builtins", "complex"},
    {"builtins", "slice"},
    {"builtins", "range"},
    {"_codecs", "encode"},
};

// Data-only classes that real training checkpoints carry. Each is rebuilt by a real unpickler from
// plain values (a class plus a state dict or raw bytes); none runs user code while loading.
constexpr Name k_benign[] = {
    {"argparse", "Namespace"},                     // args=parser.parse_args() in most training scripts
    {"numpy.core.multiarray", "scalar"},           // numpy scalars (np.float64 losses, metrics)
    {"numpy.core.multiarray", "_reconstruct"},     // numpy arrays
    {"numpy._core.multiarray", "scalar"},          // the same in numpy 2
    {"numpy._core.multiarray", "_reconstruct"},
    {"numpy", "dtype"},
    {"numpy", "ndarray"},
    {"collections", "defaultdict"},                // metric histories
    {"collections", "Counter"},
    {"collections", "deque"},
    {"builtins", "list"},
    {"builtins", "dict"},
    {"builtins", "tuple"},
    {"builtins", "object"},
    {"builtins", "int"},
    {"builtins", "float"},
    {"builtins", "str"},
    {"builtins", "bool"},
    {"copyreg", "_reconstructor"},                 // protocol 0/1 object creation (class is separate)
    {"datetime", "datetime"},
    {"datetime", "date"},
    {"datetime", "timedelta"},
    {"datetime", "timezone"},
    {"pathlib", "PosixPath"},
    {"pathlib", "WindowsPath"},
    {"pathlib", "PurePosixPath"},
    {"enum", "Enum"},
    {"decimal", "Decimal"},
    {"uuid", "UUID"},
};

// Modules whose every global runs code or reaches the system.
constexpr std::string_view k_dangerous_modules[] = {
    "os", "posix", "nt", "subprocess", "sys", "runpy", "importlib", "pickle", "_pickle", "shutil",
    "socket", "ctypes", "webbrowser", "code", "codeop", "pty", "multiprocessing", "asyncio", "http",
    "urllib", "requests", "marshal", "pdb", "bdb", "timeit", "signal", "threading", "_thread",
    "platform", "pip", "setuptools", "distutils", "zipimport", "imp", "tempfile", "glob", "io",
    "_io", "fcntl", "resource", "dill", "cloudpickle", "joblib", "telnetlib", "ftplib", "smtplib",
    "xmlrpc", "ssl", "select", "selectors", "pathlib._local",
};

constexpr std::string_view k_dangerous_builtins[] = {
    "eval", "exec", "compile", "open", "getattr", "setattr", "delattr", "__import__", "input",
    "breakpoint", "globals", "locals", "vars", "apply", "execfile", "file", "reload", "help",
    "memoryview", "type", "super", "classmethod", "staticmethod", "property", "print", "exit", "quit",
};

}  // namespace

GlobalClass classify_global(std::string_view module, std::string_view name) {
    for (const auto& n : k_safe)
        if (n.module == module && n.name == name) return GlobalClass::safe;
    if (module == "torch") {
        if (dtype_from_name(name) && name == std::string(dtype_name(*dtype_from_name(name))))
            return GlobalClass::safe;  // torch.float32 …
        if (dtype_from_storage_class(name)) return GlobalClass::safe;  // torch.FloatStorage …
        if (name == "load" || name == "save") return GlobalClass::dangerous;
    }
    if (module == "torch.storage" && (name == "TypedStorage" || name == "UntypedStorage"))
        return GlobalClass::safe;
    for (const auto& n : k_benign)
        if (n.module == module && n.name == name) return GlobalClass::benign;

    for (auto m : k_dangerous_modules)
        if (is_module_or_sub(module, m)) return GlobalClass::dangerous;
    if (module == "builtins")
        for (auto n : k_dangerous_builtins)
            if (n == name) return GlobalClass::dangerous;
    if (module == "functools" && (name == "partial" || name == "reduce")) return GlobalClass::dangerous;
    if (module == "operator" &&
        (name == "attrgetter" || name == "methodcaller" || name == "itemgetter" || name == "call"))
        return GlobalClass::dangerous;
    if (is_module_or_sub(module, "torch.hub") || is_module_or_sub(module, "torch.serialization") ||
        is_module_or_sub(module, "torch._dynamo") || is_module_or_sub(module, "torch.utils.cpp_extension"))
        return GlobalClass::dangerous;
    if (is_module_or_sub(module, "torch.jit") && (name.find("load") != std::string_view::npos))
        return GlobalClass::dangerous;
    if (module == "torch.storage" && name == "_load_from_bytes") return GlobalClass::dangerous;
    if (module == "torch._C" || starts_with(module, "torch._C.")) return GlobalClass::dangerous;

    // torch's own module classes in a pickled nn.Module: rebuilt from a class and a state dict.
    if (is_module_or_sub(module, "torch.nn.modules")) return GlobalClass::benign;
    return GlobalClass::unknown;
}

}  // namespace ckpt
