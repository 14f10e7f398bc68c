// Huge pages for a large table that is reserved but not written yet: a fresh page costs more than
// anything done with it, and 2 MiB pages fault in at about half the cost per byte of 4 KiB ones
// (docs/performance.md). Private to the library.
#pragma once

#include <cstddef>
#include <cstdint>

#include <sys/mman.h>

namespace ckpt {

constexpr size_t k_huge_page = size_t{2} << 20;

// Advises the whole 2 MiB pages inside [p, p + bytes): a hint, without effect on smaller ranges or
// where the kernel has no huge pages to give.
inline void advise_huge_pages(const void* p, size_t bytes) {
    constexpr uintptr_t k_huge = k_huge_page;
    uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + k_huge - 1) & ~(k_huge - 1);
    uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(k_huge - 1);
    if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

// Gives the whole 4 KiB pages inside [p, p + bytes) of anonymous memory back to the kernel: memory
// nothing reads again (a table's rows already handed on), which reads as zeros if it is. Not for a
// file's mapping (MappedFile::release).
inline void give_back_pages(const void* p, size_t bytes) {
    constexpr uintptr_t k_page = 4096;
    uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + k_page - 1) & ~(k_page - 1);
    uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(k_page - 1);
    if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

// The same for a vector's reserved storage.
template <class Vector>
void advise_huge_pages(const Vector& v) {
    advise_huge_pages(v.data(), v.capacity() * sizeof(typename Vector::value_type));
}

}  // namespace ckpt
