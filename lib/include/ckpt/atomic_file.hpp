// An output that appears whole or not at all. The bytes go to a temporary beside the target (same
// directory, so the final rename is atomic); commit() fsyncs it, renames it over the target and fsyncs
// the directory. Destroying an uncommitted AtomicFile removes the temporary, and so does SIGINT,
// SIGTERM or SIGHUP while it is open: a repair cut short leaves the old file and nothing else. The
// temporary is named ".NAME.PID.XXXXXXXX.tmp"; one left by a writer killed outright (SIGKILL: no
// handler runs) is removed by the next write of the same target once that PID is gone (when the
// write starts, and again after its commit), and on_stale_temporary's callback is told.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace ckpt {

class AtomicFile {
public:
    // Throws Error(io) naming `target` when its directory cannot hold a new file.
    explicit AtomicFile(std::string target);
    ~AtomicFile();
    AtomicFile(const AtomicFile&) = delete;
    AtomicFile& operator=(const AtomicFile&) = delete;

    int fd() const { return m_fd; }
    const std::string& target() const { return m_target; }
    const std::string& temp_path() const { return m_temp; }

    // Makes the temporary the target. With `replace` false the rename fails (Error(io)) if the target
    // exists by then, checked by the kernel in the rename itself (no window between check and rename).
    void commit(bool replace);
    // fsyncs the temporary now (or waits for start_sync()'s fsync), so that a later commit() is
    // only the rename. Throws Error(io) naming the target when the fsync failed.
    void sync();
    // Starts the fsync in a background thread: the caller reads the written file back (from the
    // page cache) while the disk writes it. sync() or commit() waits for it and reports its failure;
    // discard() and the destructor wait for it too, so the file is never closed under it. A thread
    // that cannot be started leaves the fsync to sync().
    void start_sync();
    // Removes the temporary now (a failed write).
    void discard();

private:
    std::string m_target, m_temp;
    int m_fd = -1;
    int m_slot = -1;  // signal-cleanup registration
    bool m_committed = false;
    bool m_synced = false;
    std::thread m_syncer;
    int m_sync_errno = 0;  // the background fsync's errno; read after joining m_syncer
};

// A set of files that belong together (shards and the index naming them): every one is fsynced
// first, so the renames follow each other closely; an existing index is removed before the first
// shard is replaced, so a run cut short between renames leaves shards without an index, never an
// index over a mix of old and new shards; the index comes last.
void commit_set(const std::vector<std::unique_ptr<AtomicFile>>& files, AtomicFile* index, bool replace);

// An output is fsynced before it is renamed into place, and for a large file that fsync is most of
// the cost (docs/performance.md). Telling the kernel to start writing each 32 MiB stretch as soon as
// it is complete overlaps the two; the fsync then waits for the tail.
class WritebackHint {
public:
    explicit WritebackHint(int fd) : m_fd(fd) {}
    // Bytes [0, end) of the file are written.
    void written_up_to(uint64_t end);

private:
    int m_fd;
    uint64_t m_started = 0;
};

// Called with the path of each temporary a killed writer left and a later one removed (the tool says
// so on stderr; the library prints nothing).
void on_stale_temporary(std::function<void(const std::string& path)> notice);

// What a writer may write, checked before it writes a byte: Error(usage) naming `target` when it
// exists and is no regular file (a device, a FIFO, a folder: an output would replace it with a
// file), when it is one of `reads` — the files the input is read from, compared by device and
// inode, links followed: a merge never writes over a rank file it reads, `--write-fingerprint` never
// over the checkpoint, with --force or without — or when it exists and `force` is false.
void check_output(const std::string& target, const std::vector<std::string>& reads, bool force);

// Writes all of `size` bytes at `offset`, retrying short writes; throws Error(io) naming `path`.
void write_all(int fd, const void* data, size_t size, uint64_t offset, const std::string& path);
// Copies `size` bytes between files (copy_file_range, falling back to read/write when the kernel
// cannot); throws Error(io) naming `path` (the output). The output range must not have been written
// yet (a new file: it reads as zeros), so a hole of the input (SEEK_HOLE) is skipped and stays a
// hole: a sparse checkpoint's copy costs no disk and no read of its holes.
void copy_range(int in_fd, uint64_t in_offset, int out_fd, uint64_t out_offset, uint64_t size,
                const std::string& path);

}  // namespace ckpt
