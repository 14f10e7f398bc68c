#include "heap.hpp"

#include <malloc.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

namespace app {

namespace {

constexpr size_t k_mib = size_t{1} << 20;
constexpr size_t k_huge = 2 * k_mib;
constexpr size_t k_mmap_threshold = 32 * k_mib;
constexpr size_t k_block = 16 * k_mib;      // below the mmap threshold: taken from the heap
constexpr size_t k_reserve = 1024 * k_mib;  // address space at most
constexpr size_t k_top_pad = 128 * 1024;    // glibc's default

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
    if (mallopt(M_MMAP_THRESHOLD, static_cast<int>(k_mmap_threshold)) == 0) return;
    mallopt(M_TRIM_THRESHOLD, static_cast<int>(std::min<size_t>(2 * k_reserve, INT32_MAX)));
    // Address space for the heap ahead of its use, so that it can be advised as huge pages before
    // a byte of it is written: one block taken with the reserve as the heap's top pad, so that the
    // heap grows once, by the block and the reserve, and freed again (it merges into the heap's free
    // top, which the threshold above keeps). A block each 16 MiB was a page fault each: 2.5 ms of
    // every run. Address space only: a page costs memory once it is written. At most a quarter of
    // the machine's memory.
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    size_t quarter = pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) / 4 : 0;
    size_t reserve = std::min(k_reserve, quarter);
    // Under a limit on address space or data (ulimit -v, -d), an eighth of it at most: the
    // reserve counts against it whether written or not.
    for (int resource : {RLIMIT_AS, RLIMIT_DATA}) {
        struct rlimit limit;
        if (getrlimit(resource, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
            reserve = std::min<size_t>(reserve, static_cast<size_t>(limit.rlim_cur) / 8);
    }
    reserve &= ~(k_huge - 1);
    if (reserve == 0) return;
    auto* start = static_cast<char*>(sbrk(0));
    if (mallopt(M_TOP_PAD, static_cast<int>(reserve)) == 0) return;
    void* block = std::malloc(k_block);  // more than the heap's first top holds: the heap grows
    asm volatile("" : : "r"(block) : "memory");  // taken, not elided with its free
    mallopt(M_TOP_PAD, static_cast<int>(k_top_pad));
    auto* end = static_cast<char*>(sbrk(0));
    std::free(block);
    if (start == reinterpret_cast<char*>(-1) || end <= start) return;  // no heap to grow (the block was mapped)
    auto begin = (reinterpret_cast<uintptr_t>(start) + k_huge - 1) & ~(k_huge - 1);
    auto stop = reinterpret_cast<uintptr_t>(end) & ~(k_huge - 1);
    if (stop > begin) madvise(reinterpret_cast<void*>(begin), stop - begin, MADV_HUGEPAGE);
}

}  // namespace app
