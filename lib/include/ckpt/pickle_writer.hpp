// Writes the data.pkl of a state dict the way torch.save does (pickle protocol 2):
//   PROTO 2 · GLOBAL collections.OrderedDict · EMPTY_TUPLE · REDUCE · MARK
//   per tensor: BINUNICODE name · GLOBAL torch._utils._rebuild_tensor_v2 · MARK
//               (MARK 'storage' GLOBAL torch.<X>Storage key 'cpu' numel TUPLE BINPERSID)
//               offset · size tuple · stride tuple · NEWFALSE · OrderedDict() · TUPLE · REDUCE
//   SETITEMS (every 1,000 items, as pickle batches them) · STOP
// Only opcodes torch.load(weights_only=True) accepts in torch 1.13, and only the globals it allows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/dtype.hpp"

namespace ckpt {

struct PickledTensor {
    std::string name;
    std::string storage_key;  // "0", "1" …: the record data/<key>
    DType dtype = DType::float32;
    uint64_t storage_numel = 0;  // elements of the storage
    int64_t offset = 0;
    std::vector<int64_t> shape, stride;
};

// Throws Error(unsupported) for a dtype torch 1.13 has no typed storage class for.
std::string state_dict_pickle(const std::vector<PickledTensor>& tensors);

}  // namespace ckpt
