// What verify.cpp (the run and the comparison) asks of verify_integrity.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "ckpt/checkpoint.hpp"
#include "ckpt/fingerprint.hpp"
#include "ckpt/globals.hpp"
#include "ckpt/verify.hpp"

namespace ckpt::detail {

// A tensor's NaN and Inf findings.
void value_findings(const TensorPrint& t, std::vector<Finding>& out);
// Each NaN and Inf finding says where the first one is: the tensors are read again, only those.
void locate_non_finite(const Checkpoint& c, bool all, std::vector<Finding>& values);
// The CRC findings (by tensor, after one mixed_saves finding when two or more storages changed), the
// checkpoint's problems, records no storage names, `values` (the NaN and Inf findings, in file
// order), and unsafe globals, into `out`.
void integrity_findings(const Checkpoint& c, const Fingerprint& fp, std::vector<Finding>&& values, const GlobalPolicy& policy,
                        std::vector<Finding>& out);
// A merged view (a DeepSpeed or DCP folder): every archive's CRCs, and ZeRO-1/2's module weights
// against the fp32 masters; counts the records checked and the bytes read.
void dist_findings(const Checkpoint& c, std::vector<Finding>& out, size_t& records, uint64_t& bytes);

}  // namespace ckpt::detail
