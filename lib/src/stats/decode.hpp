// Private to the library: a tensor's elements as float64 numbers, for the statistics.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ckpt/dtype.hpp"

namespace ckpt::detail {

// Writes `n` elements' numbers (2 per complex element) to `out`; returns how many.
using Decoder = size_t (*)(const uint8_t* p, size_t n, double* out);

// The decoder of a dtype's elements; nullptr for those that are hashed, not summarised (quantized,
// untyped, the bits types).
Decoder decoder_for(DType d);

}  // namespace ckpt::detail
