// Private to lib/: a merged record's bytes, its pieces read from their files one after the other
// (pread, no mapping faulted in) into a buffer of a small per-thread pool, converted where a piece
// says so. Throws Error(corrupt) naming the file when a piece lies past its end or the pieces do not
// add up to the record, Error(unsupported) for a conversion there is none of.
#pragma once

#include <functional>

#include "ckpt/checkpoint.hpp"
#include "io/zip.hpp"

namespace ckpt::detail {

RecordData gather(const RecordInfo& r);

// The same bytes handed to `sink` in runs of k_run bytes (the last shorter), one pooled buffer of
// that size whatever the record's: a merge writes its largest tensor in bounded memory. A run is a
// whole number of elements of any dtype (k_run is a multiple of 16).
constexpr uint64_t k_run = 32ull << 20;
void gather_runs(const RecordInfo& r, const std::function<void(ByteView)>& sink);

}  // namespace ckpt::detail
