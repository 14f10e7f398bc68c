// The process's heap, set up once before a command runs (the library leaves the allocator of a
// program that links it alone; this is the tool's own choice).
#pragma once

namespace app {

// Big blocks from the heap, kept and reused when freed, in address space advised as 2 MiB pages:
// a fresh 4 KiB page costs more than most of what is done with it, and 100,000 tensors' tables are
// ~10,000 of them (docs/performance.md, "sixth step"). A hint: without effect where the kernel has
// no transparent huge pages or the heap cannot grow, and under the sanitizers' allocators.
void prepare_heap();

}  // namespace app
