#include "stats/torch_backend.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>

#include "ckpt/checkpoint.hpp"
#include "ckpt/error.hpp"
#include "stats/torch_backend_api.h"

namespace ckpt {

namespace {

std::atomic<bool> g_loaded{false};

std::string exe_dir() {
    char buf[4096];
    ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) return ".";
    std::string p(buf, static_cast<size_t>(n));
    size_t slash = p.rfind('/');
    return slash == std::string::npos ? "." : p.substr(0, slash);
}

[[noreturn]] void missing(const std::string& why) {
    throw Error(ErrorKind::unsupported, "",
                "this needs the LibTorch backend (libckpt-torch.so), which " + why +
                    "; build ckpt-tool with libtorch-dev installed (make deps does), or set CKPT_TORCH_BACKEND");
}

// Where the backend may be: $CKPT_TORCH_BACKEND, beside the executable, ../lib/ckpt-tool/ from it.
std::vector<std::string> candidates() {
    std::vector<std::string> out;
    if (const char* env = std::getenv("CKPT_TORCH_BACKEND")) out.push_back(env);
    std::string dir = exe_dir();
    out.push_back(dir + "/libckpt-torch.so");
    out.push_back(dir + "/../lib/ckpt-tool/libckpt-torch.so");
    return out;
}

// The helper that runs torch::jit::load (backend/torch_load_main.cpp), and the backend beside it.
std::pair<std::string, std::string> load_helper() {
    for (const auto& so : candidates()) {
        if (::access(so.c_str(), F_OK) != 0) continue;
        size_t slash = so.rfind('/');
        std::string helper = (slash == std::string::npos ? std::string(".") : so.substr(0, slash)) + "/ckpt-torch-load";
        if (::access(helper.c_str(), X_OK) == 0) return {helper, so};
        missing("has no ckpt-torch-load beside it in " + helper.substr(0, helper.rfind('/')));
    }
    missing("is not installed beside " + exe_dir());
}

// The helper's answer, read from its pipe with every length bounded: whatever it says, the tool
// reads no more than it was told and never trusts a length it cannot hold.
class HelperPipe {
public:
    HelperPipe(int fd, std::string path) : m_fd(fd), m_path(std::move(path)) {}
    bool read(void* p, size_t n) {  // false at the end of the stream before n bytes
        auto* c = static_cast<char*>(p);
        while (n > 0) {
            ssize_t r = ::read(m_fd, c, n);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) throw Error(ErrorKind::io, m_path, std::string("reading ckpt-torch-load's answer: ") + std::strerror(errno));
            if (r == 0) return false;
            c += r;
            n -= static_cast<size_t>(r);
        }
        return true;
    }
    template <class T>
    T get() {
        T v{};
        if (!read(&v, sizeof v)) throw Cut{};
        return v;
    }
    std::string text(uint32_t limit) {
        auto n = get<uint32_t>();
        if (n > limit) throw Error(ErrorKind::unsupported, m_path, "ckpt-torch-load's answer holds a text of " + std::to_string(n) + " bytes");
        std::string s(n, '\0');
        if (n > 0 && !read(s.data(), n)) throw Cut{};
        return s;
    }
    struct Cut {};  // the helper stopped mid-answer (it crashed: its status says how)

private:
    int m_fd;
    std::string m_path;
};

// The signal's name, "SIGSEGV".
std::string signal_name(int sig) {
    const char* abbrev = ::sigabbrev_np(sig);
    return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

}  // namespace

bool TorchBackend::loaded() { return g_loaded.load(); }

const TorchBackend& TorchBackend::get() {
    static TorchBackend backend;
    static std::once_flag once;
    static std::string failure;
    std::call_once(once, [] {
        std::string errors;
        for (const auto& path : candidates()) {
            if (::access(path.c_str(), F_OK) != 0) continue;
            void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
            if (!h) {
                errors = ::dlerror();
                continue;
            }
            auto entry = reinterpret_cast<const ckpt_torch_api* (*)()>(::dlsym(h, "ckpt_torch_backend"));
            const ckpt_torch_api* api = entry ? entry() : nullptr;
            if (!api || api->version != CKPT_TORCH_API_VERSION) {
                errors = path + " is not a backend of this version";
                continue;
            }
            backend.m_api = api;
            backend.m_path = path;
            g_loaded = true;
            return;
        }
        failure = errors.empty() ? "is not installed beside " + exe_dir() : "could not be loaded (" + errors + ")";
    });
    if (!backend.m_api) missing(failure);
    return backend;
}

std::string TorchBackend::torch_version() const { return m_api->torch_version; }

AtenStats TorchBackend::stats(DType dtype, const std::vector<int64_t>& shape, const std::vector<int64_t>& stride,
                              int64_t offset, ByteView storage) const {
    ckpt_torch_stats s{};
    char err[512] = "";
    std::string name(dtype_name(dtype));
    if (m_api->stats(name.c_str(), static_cast<int>(shape.size()), shape.data(), stride.data(), offset, storage.data,
                     storage.size, &s, err, sizeof err) != 0)
        throw Error(ErrorKind::unsupported, "", std::string("ATen: ") + err);
    AtenStats a;
    Stat* v[] = {&a.mean, &a.std, &a.min, &a.max, &a.abs_mean, &a.l2};
    for (int i = 0; i < 6; ++i)
        if (s.defined & (1u << i)) *v[i] = s.stat[i];
    a.nan = s.nan;
    a.inf = s.inf;
    return a;
}

std::vector<uint8_t> TorchBackend::cast(DType from, ByteView src, uint64_t count, DType to) const {
    std::vector<uint8_t> out(count * dtype_size(to));
    char err[512] = "";
    std::string f(dtype_name(from)), t(dtype_name(to));
    if (count > 0 && m_api->cast(f.c_str(), src.data, count, t.c_str(), out.data(), err, sizeof err) != 0)
        throw Error(ErrorKind::unsupported, "", std::string("ATen cast: ") + err);
    return out;
}

std::vector<NamedTensor> torchscript_tensors(const std::string& path, bool with_values) {
    auto [helper, so] = naming_file(path, [] { return load_helper(); });
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw Error(ErrorKind::io, path, std::string("pipe: ") + std::strerror(errno));
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);  // LibTorch's and glibc's words
    std::string mode = with_values ? "values" : "names";
    char* argv[] = {helper.data(), so.data(), const_cast<char*>(path.c_str()), mode.data(), nullptr};
    pid_t pid = -1;
    int rc = ::posix_spawn(&pid, helper.c_str(), &actions, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(fds[1]);
    if (rc != 0) {
        ::close(fds[0]);
        throw Error(ErrorKind::io, path, "cannot start " + helper + ": " + std::strerror(rc));
    }
    // The helper is reaped on every way out; killed first when the answer is not read to its end.
    bool answered = false;
    int status = 0;
    auto reap = [&] {
        if (pid < 0) return;
        ::close(fds[0]);
        if (!answered) ::kill(pid, SIGKILL);
        while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        pid = -1;
    };
    struct Guard {
        std::function<void()> f;
        ~Guard() { f(); }
    } guard{reap};

    std::vector<NamedTensor> out;
    std::string failure;
    HelperPipe in(fds[0], path);
    try {
        for (;;) {
            char tag = in.get<char>();
            if (tag == 'E') break;
            if (tag == 'X') {
                failure = in.text(4096);
                break;
            }
            if (tag != 'T') throw Error(ErrorKind::unsupported, path, "ckpt-torch-load's answer is garbled");
            NamedTensor t;
            t.name = in.text(1u << 20);
            t.dtype = in.text(64);
            auto ndim = in.get<uint32_t>();
            if (ndim > 64) throw Error(ErrorKind::unsupported, path, "ckpt-torch-load's answer is garbled");
            for (uint32_t i = 0; i < ndim; ++i) t.shape.push_back(in.get<int64_t>());
            auto nbytes = in.get<uint64_t>();
            if (in.get<uint8_t>()) {
                if (nbytes > (uint64_t{1} << 40)) throw Error(ErrorKind::unsupported, path, "ckpt-torch-load's answer is garbled");
                t.data.resize(nbytes);
                if (nbytes > 0 && !in.read(t.data.data(), nbytes)) throw HelperPipe::Cut{};
            }
            out.push_back(std::move(t));
        }
        answered = true;
    } catch (const HelperPipe::Cut&) {
        answered = true;  // the helper is done: its status says why
    }
    reap();
    if (WIFSIGNALED(status))
        throw Error(ErrorKind::format, path,
                    "torch::jit::load crashed reading this TorchScript archive (" + signal_name(WTERMSIG(status)) +
                        " in ckpt-torch-load): it is malformed or hostile");
    if (!failure.empty()) throw Error(ErrorKind::format, path, failure);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        throw Error(ErrorKind::unsupported, path, "ckpt-torch-load stopped with status " + std::to_string(WEXITSTATUS(status)));
    return out;
}

void refuse_damaged_torchscript(const Checkpoint& c, const std::string& path) {
    if (!c.problems().empty())
        throw Error(ErrorKind::corrupt, path,
                    "the TorchScript archive is damaged, torch::jit::load is not tried: " + c.problems().front().message);
}

Fingerprint torchscript_fingerprint(const std::string& path) {
    Fingerprint f;
    f.file = path;
    f.scope = "state_dict";
    for (NamedTensor& t : torchscript_tensors(path, true)) {
        TensorPrint p;
        p.key = t.name;
        p.dtype = t.dtype;
        p.shape = t.shape;
        auto dt = dtype_from_name(t.dtype);
        uint64_t numel = 1;
        for (int64_t d : t.shape) numel *= static_cast<uint64_t>(d);
        if (dt) p.stats = buffer_stats(*dt, {t.data.data(), t.data.size()}, numel);
        p.readable = dt.has_value();
        f.tensors.push_back(std::move(p));
    }
    return f;
}

}  // namespace ckpt
