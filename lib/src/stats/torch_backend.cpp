#include "stats/torch_backend.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <mutex>

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

}  // namespace

bool TorchBackend::loaded() { return g_loaded.load(); }

const TorchBackend& TorchBackend::get() {
    static TorchBackend backend;
    static std::once_flag once;
    static std::string failure;
    std::call_once(once, [] {
        std::vector<std::string> candidates;
        if (const char* env = std::getenv("CKPT_TORCH_BACKEND")) candidates.push_back(env);
        std::string dir = exe_dir();
        candidates.push_back(dir + "/libckpt-torch.so");
        candidates.push_back(dir + "/../lib/ckpt-tool/libckpt-torch.so");
        std::string errors;
        for (const auto& path : candidates) {
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
        failure = errors.empty() ? "is not installed beside " + dir : "could not be loaded (" + errors + ")";
    });
    if (!backend.m_api) missing(failure);
    return backend;
}

std::string TorchBackend::torch_version() const { return m_api->torch_version; }

std::vector<NamedTensor> TorchBackend::torchscript_tensors(const std::string& path, bool with_values) const {
    std::vector<NamedTensor> out;
    char err[512] = "";
    auto fn = [](void* ctx, const ckpt_torch_tensor* t) {
        NamedTensor n;
        n.name = t->name;
        n.dtype = t->dtype;
        n.shape.assign(t->shape, t->shape + t->ndim);
        if (t->data) {
            const auto* p = static_cast<const uint8_t*>(t->data);
            n.data.assign(p, p + t->nbytes);
        }
        static_cast<std::vector<NamedTensor>*>(ctx)->push_back(std::move(n));
    };
    if (m_api->load_torchscript(path.c_str(), with_values ? 1 : 0, &out, fn, err, sizeof err) != 0)
        throw Error(ErrorKind::format, path, err);
    return out;
}

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
    return naming_file(path, [&] { return TorchBackend::get().torchscript_tensors(path, with_values); });
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
