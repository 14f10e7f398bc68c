// A TorchScript archive's code/: the Python-like source torch.jit.load compiles. Nothing in it runs at
// load but the `__setstate__` methods of the objects data.pkl and constants.pkl restore, and what they
// call (torch/csrc/jit/serialization/import.cpp: obj_loader; module-level code is refused by the
// importer), so those are what an archive runs when it is loaded — with weights_only=True too in torch
// <= 2.5.1 (CVE-2025-32434). Operators are reached as `ops.NS.OP(…)`, `torch.OP(…)` (aten) or methods
// of tensors (`x.set_(…)`). scan names the methods that run at load and the operators they reach:
//   - files: aten::save, aten::from_file; other processes: torch.distributed.rpc, c10d collectives;
//     raw memory: set_ (a tensor on another storage), as_strided and _unsafe_view (any sizes and
//     strides), quantized tensors made from raw parts, prim::id  → dangerous;
//   - an operator of a namespace no torch build has (a custom library's)   → unknown;
//   - the rest (aten, prim, quantized prepacking: what quantized modules' __setstate__ do) → a note.
// A file or process operator in a method that runs only when the model is called is a finding too;
// a memory operator there is a note (scripted models may take views).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/bytes.hpp"

namespace ckpt {

class PickleScanner;

struct TorchScriptSource {
    std::string name;    // the member, "archive/code/__torch__/model.py"
    ByteView code;
    uint64_t offset = 0; // where the member's data is in the file (its local header when compressed)
};

// Judges the archive's code and reports through `s` (findings kind torchscript_op, a torchscript_code note).
void scan_torchscript(const std::vector<TorchScriptSource>& sources, PickleScanner& s);

}  // namespace ckpt
