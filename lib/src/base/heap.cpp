#include "base/heap.hpp"

#include <cstddef>
#include <cstdint>

#if defined(__GLIBC__)
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace ckpt {

namespace {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool k_glibc_malloc = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool k_glibc_malloc = false;
#else
constexpr bool k_glibc_malloc = true;
#endif
#elif defined(__GLIBC__)
constexpr bool k_glibc_malloc = true;
#else
constexpr bool k_glibc_malloc = false;
#endif
}  // namespace

void give_back_free_heap() {
#if defined(__GLIBC__)
    if (!k_glibc_malloc) return;
    // The free chunks' whole pages. The pad keeps the heap's top in place: glibc would otherwise
    // shrink the heap, and the address space that grows back has no huge-page advice.
    malloc_trim(SIZE_MAX / 4);
    // The free memory at the heap's end (its top chunk, in no bin): taken as blocks below the
    // mmap threshold, their pages given back, freed again. Only memory this function owns is
    // advised, whatever the allocator's layout; a block past the top costs its header's page.
    constexpr size_t k_block = size_t{8} << 20;
    struct mallinfo2 info = mallinfo2();
    size_t blocks = info.keepcost / k_block;
    if (blocks == 0) return;
    if (blocks > 128) blocks = 128;
    void* taken[128];
    size_t n = 0;
    const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    for (; n < blocks; ++n) {
        taken[n] = malloc(k_block);
        if (!taken[n]) break;
        auto begin = (reinterpret_cast<uintptr_t>(taken[n]) + page - 1) & ~(page - 1);
        auto end = (reinterpret_cast<uintptr_t>(taken[n]) + k_block) & ~(page - 1);
        if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
    }
    for (size_t i = 0; i < n; ++i) free(taken[i]);
#endif
}

}  // namespace ckpt
