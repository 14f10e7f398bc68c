// Private to lib/: a merged record's bytes, its pieces read from their files one after the other
// (pread, no mapping faulted in) into a buffer of a small per-thread pool, converted where a piece
// says so. Throws Error(corrupt) naming the file when a piece lies past its end or the pieces do not
// add up to the record, Error(unsupported) for a conversion there is none of.
#pragma once

#include "ckpt/checkpoint.hpp"
#include "io/zip.hpp"

namespace ckpt::detail {

RecordData gather(const RecordInfo& r);

}  // namespace ckpt::detail
