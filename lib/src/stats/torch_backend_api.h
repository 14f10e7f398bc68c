/* The C ABI between ckpt-tool and its LibTorch backend, libckpt-torch.so, which the tool dlopens on
 * first use (LibTorch costs ~0.4 s and ~160 MiB to load; commands that do not need it never pay).
 * Plain C types only, so the tool and the backend need not agree on a C++ ABI. */
#ifndef CKPT_TORCH_BACKEND_API_H
#define CKPT_TORCH_BACKEND_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CKPT_TORCH_API_VERSION 2

/* One tensor handed to a callback: contiguous, CPU, little-endian; valid during the call only. */
typedef struct {
    const char* name;    /* "layer1.0.conv1.weight" */
    const char* dtype;   /* torch's name without "torch.": "float32" */
    int ndim;
    const int64_t* shape;
    const void* data;    /* NULL when values were not asked for */
    uint64_t nbytes;
} ckpt_torch_tensor;

typedef void (*ckpt_torch_tensor_fn)(void* ctx, const ckpt_torch_tensor* tensor);

/* ATen's statistics of a tensor, reduced in float64: mean, std (unbiased), min, max, mean of |x|,
 * L2 norm; and the NaN and Inf counts. `defined` says which of the six exist (bit i for stat i). */
typedef struct {
    double stat[6];
    unsigned defined;
    uint64_t nan, inf;
} ckpt_torch_stats;

typedef struct ckpt_torch_api {
    int version;
    const char* torch_version;
    /* torch::jit::load(path): calls `fn` for every named parameter, then every named buffer, of the
     * module and its submodules. Returns 0, or 1 with a message in err. */
    int (*load_torchscript)(const char* path, int with_values, void* ctx, ckpt_torch_tensor_fn fn,
                            char* err, size_t err_size);
    /* The statistics of the tensor at `storage` (storage_bytes long) with this dtype, shape, stride
     * and offset (elements), computed by ATen over at::from_blob of those bytes. */
    int (*stats)(const char* dtype, int ndim, const int64_t* shape, const int64_t* stride, int64_t offset,
                 const void* storage, uint64_t storage_bytes, ckpt_torch_stats* out, char* err, size_t err_size);
    /* `count` contiguous elements of dtype `from` at `src`, cast with PyTorch's rounding
     * (Tensor.to) to dtype `to`, written to `dst` (count × size of `to` bytes). */
    int (*cast)(const char* from, const void* src, uint64_t count, const char* to, void* dst, char* err, size_t err_size);
} ckpt_torch_api;

/* The one symbol the tool looks up. */
const ckpt_torch_api* ckpt_torch_backend(void);

#ifdef __cplusplus
}
#endif

#endif
