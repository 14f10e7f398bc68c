// What convert's writers share (private to lib/): the cast rule, the read-back check
// (convert_verify.cpp), shard planning and the Hugging Face index.
#pragma once

#include "base/text_util.hpp"

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "ckpt/atomic_file.hpp"
#include "ckpt/checkpoint.hpp"
#include "ckpt/convert.hpp"
#include "ckpt/fingerprint.hpp"

namespace ckpt::detail {

// A state-dict writer (safetensors, a pth state dict written anew) writes plain tensors only: a
// sparse, nested, quantized tensor or one without elements is Error(unsupported) naming it and
// what keeps it (`format`: "safetensors" or "a new state dict").
void require_plain(const ConvertRequest& rq, const TensorInfo& t, std::string_view name, const char* format);

bool castable(DType d);
// The dtype a tensor is written as: --dtype for floating-point tensors, integers and bools never.
DType out_dtype(const ConvertRequest& rq, DType d);
// The logical bytes of `t` cast to `to` (PyTorch's rounding, through the backend), a chunk at a time.
void cast_bytes(const TensorInfo& t, ByteView storage, DType to, const std::function<void(const uint8_t*, size_t)>& sink);
// The content hash tensor `ti` of `c` has once cast to `to` (the cast done again, independently of
// the writer).
ContentHash cast_hash(const Checkpoint& c, size_t ti, DType to);

// The written file (still the temporary) opened by the same checking readers as any input; an
// error, or `fail(why)`, is Error(corrupt) naming rq.output: "does not read back as the input".
[[noreturn]] void read_back_failed(const ConvertRequest& rq, const std::string& why);
std::unique_ptr<Checkpoint> reopen_written(const ConvertRequest& rq, const AtomicFile& out);

// The source's content hashes (hash_only), taken in a thread of their own from construction on, while
// this one writes the output (the kernel's copy runs on this core), so that after the write only the
// output is left to hash. get() waits for them, and rethrows the scan's error; destroying it before
// get() (a failed write) stops the scan at its next 64 MiB. With `start` false nothing runs until
// get(), which then scans in this thread. Computed once, however many shards ask.
// A merged view (records gathered from pieces of other files) is not scanned in a thread: gathering
// every record twice cost more than the hashing. Its writer
// hands each gathered record to offer() instead, and get() reads only what was not offered.
class SourceHashes {
public:
    SourceHashes(const Checkpoint& c, FingerprintOptions options, bool start);
    ~SourceHashes();
    SourceHashes(const SourceHashes&) = delete;
    SourceHashes& operator=(const SourceHashes&) = delete;
    const Fingerprint& get();
    // The bytes of record `record` as the writer read them: the content hash of every tensor that
    // views it, taken now. Nothing unless this is a merged view's.
    void offer(size_t record, ByteView bytes);
    // A merged record that one contiguous tensor views whole: its bytes gathered run by run
    // (gather_runs, memory one run) and handed to `sink`, the tensor's hash and `crc` (when given)
    // taken from the same runs. False, with nothing done, for any other record: the caller gathers
    // it whole and offer()s it.
    bool stream(size_t record, const std::function<void(ByteView)>& sink, uint32_t* crc);

private:
    const Checkpoint& m_checkpoint;
    FingerprintOptions m_options;
    bool m_offered = false;                                     // a merged view: offer() hashes
    std::unordered_map<std::string_view, std::vector<size_t>> m_tensors_of_record;
    std::unordered_map<size_t, TensorStats> m_known;
    std::atomic<bool> m_cancel{false};
    std::thread m_thread;
    std::optional<Fingerprint> m_fingerprint;
    std::exception_ptr m_error;
};

// Reopens the written file and compares every tensor's content hash with the source's (aliases
// with the tensor they alias; cast tensors with the source `c` cast again: without --dtype `c` may
// be null). `expected_count`: tensors the output must hold (the state dict's, less the aliases
// safetensors stores once, when not given). Throws Error(corrupt) on a difference.
void verify_written(const Checkpoint* c, const ConvertRequest& rq, AtomicFile& out, ConvertReport& r,
                    std::optional<size_t> expected_count, SourceHashes& source_hashes);

// Units (tensors or storages) of the given sizes, in order, split into shards of at most `max`
// bytes (a unit larger than that gets a shard of its own; max 0: one shard). Returns each unit's shard.
std::vector<size_t> plan_shards(const std::vector<uint64_t>& sizes, uint64_t max, size_t& shards);
// "dir/model.safetensors" → "dir/model-00001-of-00003.safetensors" (n of count, Hugging Face's names).
std::string shard_path(const std::string& output, size_t n, size_t count);
using text::base_name;
// check_output for each of `paths`: none may be a file `c` is read from, nor anything but a regular
// file, nor exist without `force`.
void check_outputs(const Checkpoint& c, const std::vector<std::string>& paths, bool force);
// The index ({"metadata": {"total_size"}, "weight_map"}), written to a temporary for the caller to commit.
std::unique_ptr<AtomicFile> write_index(const std::string& path, uint64_t total_size,
                                        const std::vector<std::pair<std::string, std::string>>& weight_map,
                                        uint64_t& bytes_written);

// The state dict as safetensors, in shards and an index with --max-shard-size (convert_safetensors.cpp);
// the source is closed as early as the read-back allows.
void write_safetensors(std::unique_ptr<Checkpoint> c, const ConvertRequest& rq, ConvertReport& r);

// pth writers (convert_pth.cpp).
// A state dict as torch.save writes one: from safetensors, a sharded checkpoint or the state dict
// of a training checkpoint (--weights-only); --max-shard-size: shards of it and an index.
void write_state_dict_pth(const Checkpoint& c, const ConvertRequest& rq, ConvertReport& r);
// The whole checkpoint written again (optimizer, arguments and all), its state dict's floating
// storages cast with --dtype.
void write_whole_pth(const Checkpoint& c, const ConvertRequest& rq, ConvertReport& r);
// rq.tree: the chosen entries of the value tree as a plain dict (merge's output).
void write_tree_pth(const Checkpoint& c, const ConvertRequest& rq, ConvertReport& r);
// The name a state-dict tensor is written under (rq.rename).
inline std::string written_name(const ConvertRequest& rq, std::string_view name) {
    return rq.rename ? rq.rename(std::string(name)) : std::string(name);
}

}  // namespace ckpt::detail
