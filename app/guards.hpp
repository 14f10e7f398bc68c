// What the process does about signals the library does not handle itself: the tool's own policy, set
// up once before a command runs, as the heap is (heap.hpp).
#pragma once

#include <string>

namespace app {

// SIGXFSZ (a write past `ulimit -f`) is ignored, so the write fails with EFBIG and the writer's error
// names its output and removes its temporary. SIGBUS (an input mapped while another process cuts it
// short) ends the run with one line naming the file, the temporaries removed, exit 2.
void guard_signals();

}  // namespace app
