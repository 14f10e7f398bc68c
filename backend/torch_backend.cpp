// libckpt-torch.so: what PyTorch itself is the authority on, behind the C ABI of
// ckpt/torch_backend_api.h. The only translation unit that includes LibTorch headers.
#include <torch/script.h>
#include <torch/version.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "stats/torch_backend_api.h"

namespace {

void set_error(char* err, size_t size, const std::string& what) {
    if (size == 0) return;
    std::snprintf(err, size, "%s", what.c_str());
}

// The first line of LibTorch's message that says something (some begin with a newline).
std::string first_line(const std::string& what) {
    size_t at = 0;
    while (at < what.size()) {
        size_t end = what.find('\n', at);
        if (end == std::string::npos) end = what.size();
        std::string line = what.substr(at, end - at);
        if (line.find_first_not_of(" \t\r") != std::string::npos) return line;
        at = end + 1;
    }
    return "no message";
}

// torch's dtype names without "torch."; the scalar types the core knows.
const char* dtype_name(c10::ScalarType t) {
    switch (t) {
        case c10::kFloat: return "float32";
        case c10::kDouble: return "float64";
        case c10::kHalf: return "float16";
        case c10::kBFloat16: return "bfloat16";
        case c10::kComplexHalf: return "complex32";
        case c10::kComplexFloat: return "complex64";
        case c10::kComplexDouble: return "complex128";
        case c10::kByte: return "uint8";
        case c10::kChar: return "int8";
        case c10::kShort: return "int16";
        case c10::kInt: return "int32";
        case c10::kLong: return "int64";
        case c10::kBool: return "bool";
        default: return nullptr;
    }
}

bool scalar_type(const char* name, c10::ScalarType& out) {
    static const std::pair<const char*, c10::ScalarType> k_types[] = {
        {"float32", c10::kFloat}, {"float64", c10::kDouble}, {"float16", c10::kHalf},
        {"bfloat16", c10::kBFloat16}, {"complex32", c10::kComplexHalf}, {"complex64", c10::kComplexFloat},
        {"complex128", c10::kComplexDouble}, {"uint8", c10::kByte}, {"int8", c10::kChar},
        {"int16", c10::kShort}, {"int32", c10::kInt}, {"int64", c10::kLong}, {"bool", c10::kBool}};
    for (const auto& [n, t] : k_types)
        if (std::strcmp(n, name) == 0) {
            out = t;
            return true;
        }
    return false;
}

void emit(const std::string& name, const at::Tensor& value, int with_values, void* ctx, ckpt_torch_tensor_fn fn) {
    at::Tensor t = value.detach().cpu().contiguous();
    const char* dt = dtype_name(t.scalar_type());
    std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
    ckpt_torch_tensor out{};
    out.name = name.c_str();
    out.dtype = dt ? dt : "unknown";
    out.ndim = static_cast<int>(shape.size());
    out.shape = shape.data();
    out.data = with_values && dt ? t.data_ptr() : nullptr;
    out.nbytes = t.numel() * t.element_size();
    fn(ctx, &out);
}

int load_torchscript(const char* path, int with_values, void* ctx, ckpt_torch_tensor_fn fn, char* err, size_t err_size) {
    try {
        torch::jit::Module m = torch::jit::load(path, c10::Device(c10::kCPU));
        for (const auto& p : m.named_parameters(/*recurse=*/true)) emit(p.name, p.value, with_values, ctx, fn);
        for (const auto& b : m.named_buffers(/*recurse=*/true)) emit(b.name, b.value, with_values, ctx, fn);
        return 0;
    } catch (const std::exception& e) {
        set_error(err, err_size, "torch::jit::load: " + first_line(e.what()));
        return 1;
    }
}

int stats(const char* dtype, int ndim, const int64_t* shape, const int64_t* stride, int64_t offset,
          const void* storage, uint64_t storage_bytes, ckpt_torch_stats* out, char* err, size_t err_size) {
    try {
        c10::ScalarType st;
        if (!scalar_type(dtype, st)) {
            set_error(err, err_size, std::string("no ATen type for ") + dtype);
            return 1;
        }
        int64_t esz = static_cast<int64_t>(c10::elementSize(st));
        at::Tensor whole = at::from_blob(const_cast<void*>(storage), {static_cast<int64_t>(storage_bytes) / esz},
                                         at::TensorOptions().dtype(st));
        at::Tensor t = whole.as_strided(c10::IntArrayRef(shape, ndim), c10::IntArrayRef(stride, ndim), offset);
        if (t.is_complex()) t = at::view_as_real(t.dim() == 0 ? t.reshape({1}) : t);
        at::Tensor d = t.to(at::kDouble).reshape({-1});
        *out = ckpt_torch_stats{};
        out->nan = static_cast<uint64_t>(d.isnan().sum().item<int64_t>());
        out->inf = static_cast<uint64_t>(d.isinf().sum().item<int64_t>());
        int64_t n = d.numel();
        if (n == 0) return 0;
        out->stat[0] = d.mean().item<double>();
        out->stat[2] = d.min().item<double>();
        out->stat[3] = d.max().item<double>();
        out->stat[4] = d.abs().mean().item<double>();
        out->stat[5] = d.norm().item<double>();
        out->defined = 0x3d;
        if (n > 1) {
            out->stat[1] = d.std().item<double>();
            out->defined |= 0x2;
        }
        return 0;
    } catch (const std::exception& e) {
        std::string what = e.what();
        set_error(err, err_size, what.substr(0, what.find('\n')));
        return 1;
    }
}

int cast(const char* from, const void* src, uint64_t count, const char* to, void* dst, char* err, size_t err_size) {
    try {
        c10::ScalarType a, b;
        if (!scalar_type(from, a) || !scalar_type(to, b)) {
            set_error(err, err_size, std::string("no ATen type for ") + from + " or " + to);
            return 1;
        }
        auto opts = at::TensorOptions().dtype(a);
        at::Tensor in = at::from_blob(const_cast<void*>(src), {static_cast<int64_t>(count)}, opts);
        at::Tensor out = at::from_blob(dst, {static_cast<int64_t>(count)}, at::TensorOptions().dtype(b));
        out.copy_(in.to(b));
        return 0;
    } catch (const std::exception& e) {
        std::string what = e.what();
        set_error(err, err_size, what.substr(0, what.find('\n')));
        return 1;
    }
}

const ckpt_torch_api k_api = {CKPT_TORCH_API_VERSION, TORCH_VERSION, load_torchscript, stats, cast};

}  // namespace

extern "C" __attribute__((visibility("default"))) const ckpt_torch_api* ckpt_torch_backend(void) { return &k_api; }
