#include "heap.hpp"

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

namespace app {

namespace {

constexpr size_t k_mib = size_t{1} << 20;
constexpr size_t k_huge = 2 * k_mib;
constexpr size_t k_block = 16 * k_mib;  // below the mmap threshold: taken from the heap
constexpr size_t k_blocks_max = 64;     // 1 GiB of address space at most

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool k_own_allocator = false;  // the sanitizers' malloc ignores mallopt
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool k_own_allocator = false;
#else
constexpr bool k_own_allocator = true;
#endif
#else
constexpr bool k_own_allocator = true;
#endif

}  // namespace

void prepare_heap() {
    if (!k_own_allocator) return;
    // A block below 32 MiB comes from the heap, not a mapping of its own that is unmapped when
    // freed and faulted in again when the next vector of its size is made (glibc's threshold
    // starts at 128 KiB); the top of the heap is not given back during a run.
    if (mallopt(M_MMAP_THRESHOLD, static_cast<int>(32 * k_mib)) == 0) return;
    mallopt(M_TRIM_THRESHOLD, static_cast<int>(std::min<size_t>(k_blocks_max * k_block * 2, INT32_MAX)));
    // Address space for the heap ahead of its use, so that it can be advised as huge pages before
    // a byte of it is written: blocks taken and freed again (they merge into the heap's free top,
    // which the threshold above keeps). Address space only: a page costs memory once it is
    // written. At most a quarter of the machine's memory.
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    size_t want = pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) / 4 : 0;
    size_t blocks = std::min(k_blocks_max, want / k_block);
    if (blocks == 0) return;
    void* taken[k_blocks_max];
    size_t n = 0;
    auto* start = static_cast<char*>(sbrk(0));
    for (; n < blocks; ++n) {
        taken[n] = std::malloc(k_block);
        if (!taken[n]) break;
    }
    auto* end = static_cast<char*>(sbrk(0));
    for (size_t i = 0; i < n; ++i) std::free(taken[i]);
    if (start == reinterpret_cast<char*>(-1) || end <= start) return;  // no heap to grow (blocks were mapped)
    auto begin = (reinterpret_cast<uintptr_t>(start) + k_huge - 1) & ~(k_huge - 1);
    auto stop = reinterpret_cast<uintptr_t>(end) & ~(k_huge - 1);
    if (stop > begin) madvise(reinterpret_cast<void*>(begin), stop - begin, MADV_HUGEPAGE);
}

}  // namespace app
