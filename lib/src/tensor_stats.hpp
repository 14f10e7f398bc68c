// Private to the library: the one-pass statistics fingerprint.cpp computes, for the scan of
// fingerprint_scan.cpp. `crc`, when given, takes the CRC-32 of the bytes in the same pass (the
// tensor is its whole record, contiguous); `hash_only` skips the statistics.
#pragma once

#include <functional>

#include "ckpt/fingerprint.hpp"

namespace ckpt::detail {

// `release`, when given, is called with each 64 MiB window of a contiguous read once it is done
// with, so that a tensor larger than memory passes through a bounded set of resident pages.
TensorStats stats_over(DType dtype, const uint8_t* base, const TensorInfo* view, uint64_t count, uint32_t* crc,
                       bool hash_only, const std::function<void(ByteView)>& release = {});

}  // namespace ckpt::detail
