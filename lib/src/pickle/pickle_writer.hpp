// Writes the data.pkl of a state dict the way torch.save does (pickle protocol 2):
//   PROTO 2 · GLOBAL collections.OrderedDict · EMPTY_TUPLE · REDUCE · MARK
//   per tensor: BINUNICODE name · GLOBAL torch._utils._rebuild_tensor_v2 · MARK
//               (MARK 'storage' GLOBAL torch.<X>Storage key 'cpu' numel TUPLE BINPERSID)
//               offset · size tuple · stride tuple · NEWFALSE · OrderedDict() · TUPLE · REDUCE
//   SETITEMS (every 1,000 items, as pickle batches them) · STOP
// Only opcodes torch.load(weights_only=True) accepts in torch 1.13, and only the globals it allows.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ckpt/dtype.hpp"
#include "ckpt/value.hpp"

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

// A value tree written as torch.save writes plain data: a dict of the `top` entries holding None,
// bools, ints, floats, str, bytes, tuples (torch.Size), lists, dicts (OrderedDict), sets, dtypes
// and tensors (`tensor(i)` gives what a tensor value's index stands for). The keys of `renamed` (a
// dict of the tree) are written as rename(key). A dict entry whose value holds anything else (an
// object of a class, a global) is left out and its dotted path added to `skipped`; such a value
// inside a list or tuple is Error(unsupported).
struct TreeEntry {
    std::string key;
    const Value* value;
};
std::string tree_pickle(const std::vector<TreeEntry>& top, const std::function<const PickledTensor&(size_t)>& tensor,
                        const Value* renamed, const std::function<std::string(const std::string&)>& rename,
                        std::vector<std::string>& skipped);
// Whether tree_pickle writes `v` (and everything in it).
bool tree_writable(const Value* v);

}  // namespace ckpt
