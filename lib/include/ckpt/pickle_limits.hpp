// The pickle machine's caps, part of OpenOptions.
#pragma once

#include <cstdint>

namespace ckpt {

// Caps the pickle machine applies to what a file asks of it: past one, reading is an Error(limit).
struct PickleLimits {
    uint32_t max_depth = 1000;            // nesting of containers and objects
    uint64_t max_memo = 50'000'000;       // memo entries
    uint64_t max_stack = 50'000'000;      // values on the stack (and marks)
    uint64_t max_container = 100'000'000; // items of one container
};

}  // namespace ckpt
