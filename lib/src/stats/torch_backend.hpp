// The LibTorch backend, from the core's side: found beside the binary and dlopened on first use.
// Nothing here includes LibTorch; a process that never calls TorchBackend::get() never maps it.
#pragma once

#include <string>
#include <vector>

#include "ckpt/dtype.hpp"
#include "ckpt/fingerprint.hpp"

struct ckpt_torch_api;

namespace ckpt {

struct NamedTensor {
    std::string name, dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> data;  // contiguous; empty unless values were asked for
};

struct AtenStats {
    Stat mean, std, min, max, abs_mean, l2;  // as TensorStats' (ckpt/fingerprint.hpp)
    uint64_t nan = 0, inf = 0;
};

class TorchBackend {
public:
    // Loads libckpt-torch.so (and with it LibTorch) once. Looks in $CKPT_TORCH_BACKEND, then beside
    // the executable, then in ../lib/ckpt-tool/ from it. Throws Error(unsupported) saying what is
    // missing and how to get it.
    static const TorchBackend& get();
    // Whether a process has loaded it (tests check that most commands never do).
    static bool loaded();

    const std::string& path() const { return m_path; }
    std::string torch_version() const;

    // torch::jit::load: named parameters, then named buffers. Throws Error(format) naming `path`.
    std::vector<NamedTensor> torchscript_tensors(const std::string& path, bool with_values) const;
    // ATen's float64 statistics of a tensor over its storage bytes (the test oracle).
    AtenStats stats(DType dtype, const std::vector<int64_t>& shape, const std::vector<int64_t>& stride,
                    int64_t offset, ByteView storage) const;

    // `count` elements of `from` cast to `to` with PyTorch's rounding (Tensor.to).
    std::vector<uint8_t> cast(DType from, ByteView src, uint64_t count, DType to) const;

private:
    TorchBackend() = default;
    const ckpt_torch_api* m_api = nullptr;
    std::string m_path;
};

// TorchBackend::get().torchscript_tensors, with errors naming `path`.
std::vector<NamedTensor> torchscript_tensors(const std::string& path, bool with_values);

// A TorchScript model's parameters and buffers as a fingerprint (values through the backend,
// statistics by the core, like any other tensor).
Fingerprint torchscript_fingerprint(const std::string& path);

}  // namespace ckpt
