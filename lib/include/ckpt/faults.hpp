// What a handler of a fatal signal may ask of the library, which handles none itself (the tool's
// own handlers: app/guards.cpp). Both are safe in a signal handler: a fixed table read without locks
// or allocation, and unlink.
#pragma once

namespace ckpt {

// The path of the mapped input that `addr` lies in (SIGBUS: the file was cut short while mapped), or
// nullptr; the 64 most recent mappings are known.
const char* mapped_file_at(const void* addr);

// Removes every temporary an AtomicFile of this process holds open, now.
void remove_temporaries_now();

}  // namespace ckpt
