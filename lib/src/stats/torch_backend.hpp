// The LibTorch backend, from the core's side: found beside the binary and dlopened on first use.
// Nothing here includes LibTorch; a process that never calls TorchBackend::get() never maps it.
#pragma once

#include <string>
#include <vector>

#include "ckpt/dtype.hpp"
#include "ckpt/fingerprint.hpp"

struct ckpt_torch_api;

namespace ckpt {

class Checkpoint;

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

// torch::jit::load(path): named parameters, then named buffers. Run by the helper ckpt-torch-load
// (beside the backend) in a process of its own, its answer read from a pipe: LibTorch's unpickler
// trusts what it reads, and a malformed archive that crashes it is an Error(format) naming `path`
// here, never a crash of the tool. This process does not load LibTorch for it.
std::vector<NamedTensor> torchscript_tensors(const std::string& path, bool with_values);

// Throws Error(corrupt) naming `path` when the TorchScript archive `c` has problems (a constants.pkl
// this VM cannot run, a record out of bounds): such an archive is never handed to torch::jit::load.
void refuse_damaged_torchscript(const Checkpoint& c, const std::string& path);

// A TorchScript model's parameters and buffers as a fingerprint (values through the backend,
// statistics by the core, like any other tensor).
Fingerprint torchscript_fingerprint(const std::string& path);

}  // namespace ckpt
