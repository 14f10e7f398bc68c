// The process heap's free memory, given back between the phases of a command. Private to the
// library.
#pragma once

namespace ckpt {

// Gives the pages of the heap's free memory back to the kernel, keeping its address space (and the
// huge-page advice the tool puts on it, app/heap.cpp): for a command about to open a second large
// checkpoint after closing the first (a writer reading its output back), whose memory would
// otherwise stay in the process beside the second's. Free memory is taken again at the cost of its
// faults. Without effect outside glibc and under the sanitizers' allocators.
void give_back_free_heap();

}  // namespace ckpt
