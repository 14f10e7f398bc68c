// GlobalPolicy: default-deny, names judged as the unpickler resolves them.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>

#include "ckpt/error.hpp"
#include "ckpt/globals.hpp"
#include "pickle/global_lists.hpp"

using namespace ckpt;

namespace {

GlobalClass cls(std::string_view module, std::string_view name, const GlobalPolicy& p = GlobalPolicy::standard()) {
    return p.judge(module, name).cls;
}

}  // namespace

TEST_CASE("globals: the lists are sorted where they are searched, and no name is denied twice") {
    const char* problem = global_lists::check_lists();
    INFO((problem ? problem : ""));
    CHECK(problem == nullptr);
}

TEST_CASE("globals: torch's weights_only list is safe, and says so") {
    for (auto [m, n] : {std::pair{"torch._utils", "_rebuild_tensor_v2"}, {"torch", "FloatStorage"}, {"torch", "float8_e5m2fnuz"},
                        {"collections", "OrderedDict"}, {"_codecs", "encode"}, {"torch.nn.parameter", "Parameter"},
                        {"torch", "Size"}, {"builtins", "set"}, {"torch.serialization", "_get_layout"},
                        {"__builtin__", "set"}, {"torch", "per_channel_affine"}}) {
        GlobalVerdict v = GlobalPolicy::standard().judge(m, n);
        INFO(m << "." << n);
        CHECK(v.cls == GlobalClass::safe);
        CHECK(v.weights_only);
    }
    // torch 2.6 loads these once their module is imported.
    CHECK(cls("torch.nested._internal.nested_tensor", "NestedTensor") == GlobalClass::safe);
    CHECK(cls("torch._dynamo.decorators", "_DimRange") == GlobalClass::safe);
}

TEST_CASE("globals: reviewed data classes are benign, not on torch's list") {
    for (auto [m, n] : {std::pair{"argparse", "Namespace"}, {"numpy.core.multiarray", "_reconstruct"}, {"numpy._core.multiarray", "scalar"},
                        {"numpy", "dtype"}, {"pathlib", "PosixPath"}, {"pathlib._local", "PosixPath"}, {"datetime", "datetime"},
                        {"collections", "defaultdict"}, {"builtins", "len"}, {"collections.abc", "Iterable"},
                        {"_collections_abc", "Mapping"}, {"__future__", "annotations"}, {"decimal", "Decimal"},
                        {"omegaconf.dictconfig", "DictConfig"}, {"typing", "Any"}, {"torch.nn.modules.conv", "Conv2d"},
                        {"copyreg", "_reconstructor"}, {"copy_reg", "_reconstructor"}, {"exceptions", "ValueError"},
                        {"builtins", "KeyError"}, {"__torch__.torch.nn.modules.conv", "Conv2d"},
                        {"torch.jit._pickle", "build_intlist"}, {"numpy.random._pickle", "__randomstate_ctor"},
                        {"torch.nn.functional", "relu"}, {"torch._C._nn", "gelu"}, {"torch", "OrderedDict"}}) {
        GlobalVerdict v = GlobalPolicy::standard().judge(m, n);
        INFO(m << "." << n << ": " << v.rule << ", " << v.reason);
        CHECK(v.cls == GlobalClass::benign);
        CHECK_FALSE(v.weights_only);
    }
}

TEST_CASE("globals: default-deny: the standard library, torch and numpy outside the lists are dangerous") {
    // Each a gadget of a public scanner's advisory that a deny-list had missed.
    for (auto [m, n] : {std::pair{"idlelib.pyshell", "ModifiedInterpreter.runcode"}, {"cProfile", "run"}, {"profile", "Profile.runctx"},
                        {"trace", "Trace.run"}, {"pkgutil", "resolve_name"}, {"pydoc", "locate"}, {"lib2to3.pgen2.grammar", "Grammar.loads"},
                        {"doctest", "debug_script"}, {"ensurepip", "_run_pip"}, {"venv", "create"}, {"types", "CodeType"},
                        {"types", "FunctionType"}, {"operator", "methodcaller"}, {"_operator", "attrgetter"}, {"logging", "FileHandler"},
                        {"numpy.f2py.crackfortran", "getlincoef"}, {"numpy.testing._private.utils", "runstring"},
                        {"torch.jit.unsupported_tensor_ops", "execWrapper"}, {"torch._dynamo.guards", "GuardBuilder.get"},
                        {"torch.fx.experimental.symbolic_shapes", "ShapeEnv.evaluate_guards_expression"},
                        {"torch.utils.collect_env", "run"}, {"torch._inductor.codecache", "compile_file"},
                        {"torch.utils.bottleneck.__main__", "run_cprofile"}, {"_aix_support", "_read_cmd_output"},
                        {"uuid", "_get_command_stdout"}, {"imaplib", "IMAP4_stream"}, {"_pyrepl.pager", "pipe_pager"},
                        {"test.support.script_helper", "assert_python_ok"}, {"httplib", "HTTPSConnection"},
                        {"ssl", "get_server_certificate"}, {"string", "capwords"}, {"torch", "load"}, {"numpy", "load"},
                        {"torch", "_utils"}, {"_thread", "allocate_lock"}, {"linecache", "getline"}, {"sqlite3", "connect"},
                        {"torch._C", "_get_tracing_state"}, {"torch._C._nn", "Gelu.__init__"}, {"unittest.mock", "_importer"},
                        {"_interpreters", "create"}, {"fickling.hook", "remove_hook"}, {"torch.nn.functional", "Thing.x"}}) {
        INFO(m << "." << n);
        CHECK(cls(m, n) == GlobalClass::dangerous);
    }
    // Known code execution outside the standard library too.
    for (auto [m, n] : {std::pair{"requests.api", "get"}, {"aiohttp.client", "ClientSession"}, {"dill._dill", "_create_function"},
                        {"cloudpickle.cloudpickle", "_make_function"}, {"joblib", "load"}, {"yaml", "unsafe_load"}}) {
        INFO(m << "." << n);
        CHECK(cls(m, n) == GlobalClass::dangerous);
    }
}

TEST_CASE("globals: aliases and dotted names are judged by what they reach") {
    CHECK(cls("posix", "system") == GlobalClass::dangerous);
    CHECK(cls("nt", "system") == GlobalClass::dangerous);
    CHECK(cls("__builtin__", "eval") == GlobalClass::dangerous);
    CHECK(cls("__builtins__", "exec") == GlobalClass::dangerous);
    CHECK(cls("__builtin__", "reduce") == GlobalClass::dangerous);  // functools.reduce, through fix_imports
    CHECK(cls("builtins", "eval.__call__") == GlobalClass::dangerous);
    CHECK(cls("pathlib", "os.system") == GlobalClass::dangerous);
    CHECK(cls("numpy", "__builtins__") == GlobalClass::dangerous);
    CHECK(cls("__future__", "_ssl.RAND_bytes") == GlobalClass::dangerous);
    CHECK(cls("collections", "OrderedDict.__init__") == GlobalClass::dangerous);
    CHECK(cls("__main__", "runpy") == GlobalClass::dangerous);
    CHECK(cls("mylib", "Model.__reduce__") == GlobalClass::dangerous);
    CHECK(cls("mylib.utils", "os.system") == GlobalClass::dangerous);
    // A dotted name under an allowed one is not allowed: exact names only.
    CHECK(cls("argparse", "Namespace.__init__") == GlobalClass::dangerous);
    CHECK(cls("torch._utils", "_rebuild_tensor_v2.__globals__") == GlobalClass::dangerous);
}

TEST_CASE("globals: what no list names is unknown, and the user's rules allow it") {
    CHECK(cls("__main__", "Net") == GlobalClass::unknown);
    CHECK(cls("mylib.models", "Net") == GlobalClass::unknown);
    CHECK(cls("transformers.training_args", "TrainingArguments") == GlobalClass::unknown);
    GlobalPolicy p;
    p.allow("mylib.models.Net", "--allow");
    p.allow("transformers.*", "--allow");
    p.allow("string.*", "--allow");
    GlobalVerdict v = p.judge("mylib.models", "Net");
    CHECK(v.cls == GlobalClass::allowed);
    CHECK(v.rule == "--allow mylib.models.Net");
    CHECK(p.judge("mylib.models", "Other").cls == GlobalClass::unknown);
    CHECK(p.judge("transformers.training_args", "TrainingArguments").cls == GlobalClass::allowed);
    CHECK(p.judge("transformersx", "A").cls == GlobalClass::unknown);  // the wildcard stops at the dot
    // A standard-library name that is not reviewed can be allowed; what runs code cannot.
    CHECK(GlobalPolicy::standard().judge("string", "capwords").cls == GlobalClass::dangerous);
    CHECK(p.judge("string", "capwords").cls == GlobalClass::allowed);
    GlobalPolicy all;
    all.allow("os.*", "--allow");
    all.allow("builtins.eval", "--allow");
    all.allow("mylib.*", "--allow");
    GlobalVerdict os = all.judge("os", "system");
    CHECK(os.cls == GlobalClass::dangerous);
    CHECK(os.reason.find("--allow os.* does not lift that") != std::string::npos);
    CHECK(all.judge("builtins", "eval").cls == GlobalClass::dangerous);
    CHECK(all.judge("mylib", "os.system").cls == GlobalClass::dangerous);
    CHECK(all.judge("mylib", "Model.__reduce__").cls == GlobalClass::dangerous);
    CHECK(GlobalPolicy::standard().judge("mylib.models", "Net").cls == GlobalClass::unknown);  // rules are per policy
}

TEST_CASE("globals: allow rules and allow files are checked") {
    GlobalPolicy p;
    CHECK_THROWS_AS(p.allow("not a name", "--allow"), Error);
    CHECK_THROWS_AS(p.allow("Net", "--allow"), Error);  // a module is needed
    CHECK_THROWS_AS(p.allow(".*", "--allow"), Error);
    CHECK_NOTHROW(p.allow("__main__.*", "--allow"));
    std::string path = std::string(CKPT_TEST_SCRATCH) + "/allow.txt";
    {
        std::ofstream f(path);
        f << "# trusted\n  mylib.Net  \n\nother.*   # and the rest\n";
    }
    GlobalPolicy q;
    q.allow_file(path);
    CHECK(q.judge("mylib", "Net").rule == "mylib.Net (" + path + ":2)");
    CHECK(q.judge("other.pkg", "X").cls == GlobalClass::allowed);
    {
        std::ofstream f(path);
        f << "ok.Name\nbad name\n";
    }
    try {
        GlobalPolicy r;
        r.allow_file(path);
        FAIL("no error");
    } catch (const Error& e) {
        CHECK(std::string(e.what()).find(path + ":2") != std::string::npos);
    }
    CHECK_THROWS_AS(GlobalPolicy().allow_file(path + ".missing"), Error);
    std::remove(path.c_str());
}

TEST_CASE("globals: module names as the unpickler imports them") {
    CHECK(canonical_module("__builtin__") == "builtins");
    CHECK(canonical_module("posix") == "os");
    CHECK(canonical_module("_operator") == "operator");
    CHECK(canonical_module("httplib") == "http.client");
    CHECK(canonical_module("copy_reg") == "copyreg");
    CHECK(python3_module("posix") == "posix");  // fix_imports renames Python 2's names only
    CHECK(importable_module_name("torch._utils"));
    CHECK(importable_module_name("__torch__.a.___torch_mangle_0"));
    CHECK_FALSE(importable_module_name(""));
    CHECK_FALSE(importable_module_name("lass Foo(Module):"));
    CHECK_FALSE(importable_module_name("a..b"));
    CHECK_FALSE(importable_module_name("9lives"));
}
