// Private to the library: the one-pass statistics fingerprint.cpp computes, for the scan of
// fingerprint_scan.cpp. `crc`, when given, takes the CRC-32 of the bytes in the same pass (the
// tensor is its whole record, contiguous); `hash_only` skips the statistics.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/fingerprint.hpp"

namespace ckpt::detail {

// `release`, when given, is called with each 64 MiB window of a contiguous read once it is done
// with, so that a tensor larger than memory passes through a bounded set of resident pages.
TensorStats stats_over(DType dtype, const uint8_t* base, const TensorInfo* view, uint64_t count, uint32_t* crc,
                       bool hash_only, const std::function<void(ByteView)>& release = {});
// The same over `count` contiguous elements at `offset` of the file `fd` (`path`, for errors), read
// with pread through `buffer`: from the page cache at copy speed, where faulting the pages in
// through a mapping costs about three times as much (and leaves no pages to release afterwards).
// Throws Error(io), or Error(corrupt) when the file ends early.
TensorStats stats_of_file_range(DType dtype, int fd, uint64_t offset, uint64_t count, uint32_t* crc, bool hash_only,
                                std::vector<uint8_t>& buffer, const std::string& path);

// The same over a contiguous tensor handed over in parts, in order (a merged tensor written run by
// run): the parts need not end on an element's boundary. The statistics equal stats_over's of the
// whole when every part but the last is a multiple of 1,024 elements (the decoder's chunk).
class StatsStream {
public:
    StatsStream(DType dtype, uint32_t* crc, bool hash_only);
    ~StatsStream();
    StatsStream(const StatsStream&) = delete;
    StatsStream& operator=(const StatsStream&) = delete;
    void add(ByteView part);
    TensorStats finish();

private:
    struct Impl;
    std::unique_ptr<Impl> m;
};

// The statistics of a tensor made of others: `values` (a sparse tensor's values, a nested tensor's
// components) summarised as one list of numbers with `zeros` more zeros (a sparse tensor's
// elements that are not stored), and a hash of the `hashed` parts' hashes, in order.
TensorStats combine_stats(const std::vector<const TensorStats*>& values, uint64_t zeros,
                          const std::vector<const TensorStats*>& hashed);

}  // namespace ckpt::detail
