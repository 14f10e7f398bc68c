// ckpt-torch-load BACKEND PATH names|values: torch::jit::load of PATH in a process of its own.
//
// LibTorch's unpickler trusts what it reads: a malformed TorchScript archive can corrupt its heap
// (SIGABRT, SIGSEGV). The tool never runs it in its own process: it starts this helper (found beside
// libckpt-torch.so) and reads its answer from a pipe, so a crash here is an error there, one line
// naming the file. No LibTorch header here either: the backend is dlopened through its C ABI.
//
// Standard output, every integer little-endian:
//   'T' u32 name_len name u32 dtype_len dtype u32 ndim i64[ndim] u64 nbytes u8 has_data [nbytes bytes]
//   … one per parameter, then per buffer; then 'E' (done) or 'X' u32 len message (an error).
#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "stats/torch_backend_api.h"

namespace {

void write_all(const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
        ssize_t w = ::write(1, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) std::_Exit(3);  // the tool is gone: nothing to tell
        c += w;
        n -= static_cast<size_t>(w);
    }
}

template <class T>
void put(T v) {
    write_all(&v, sizeof v);  // x86-64 and aarch64: little-endian, as the reader expects
}

void put_text(const char* s) {
    uint32_t n = static_cast<uint32_t>(std::strlen(s));
    put(n);
    write_all(s, n);
}

[[noreturn]] void fail(const std::string& why) {
    put('X');
    put_text(why.c_str());
    std::_Exit(1);
}

void tensor(void*, const ckpt_torch_tensor* t) {
    put('T');
    put_text(t->name);
    put_text(t->dtype);
    put(static_cast<uint32_t>(t->ndim));
    for (int i = 0; i < t->ndim; ++i) put(t->shape[i]);
    put(t->nbytes);
    put(static_cast<uint8_t>(t->data ? 1 : 0));
    if (t->data) write_all(t->data, t->nbytes);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 4) fail("usage: ckpt-torch-load BACKEND PATH names|values");
    void* h = ::dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) fail(std::string("cannot load the backend: ") + ::dlerror());
    auto entry = reinterpret_cast<const ckpt_torch_api* (*)()>(::dlsym(h, "ckpt_torch_backend"));
    const ckpt_torch_api* api = entry ? entry() : nullptr;
    if (!api || api->version != CKPT_TORCH_API_VERSION) fail(std::string(argv[1]) + " is not a backend of this version");
    char err[512] = "";
    if (api->load_torchscript(argv[2], std::strcmp(argv[3], "values") == 0, nullptr, tensor, err, sizeof err) != 0)
        fail(err);
    put('E');
    return 0;
}
