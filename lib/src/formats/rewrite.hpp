// Writing a torch zip checkpoint back with a patched pickle (strip-prefix renames keys, convert
// recasts storages): the edits to data.pkl, and the zip written again as torch writes it.
//
// A patch replaces whole opcodes and leaves every other byte of the pickle as torch wrote it; FRAME
// opcodes are dropped (framing is optional and their lengths would be stale). No global is added that
// torch's weights_only unpickler would refuse.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ckpt/bytes.hpp"
#include "ckpt/checkpoint.hpp"
#include "ckpt/dtype.hpp"

namespace ckpt {

class ZipWriter;
class MappedFile;

// 40 bytes: a rename of 100,000 keys makes 200,000 of them, and no string of its own per edit.
struct PickleEdit {
    uint64_t pos = 0, len = 0;  // the opcode replaced, within the pickle
    // What it becomes; with `unicode`, the text a BINUNICODE opcode made here pushes. The caller's
    // text (a value's, a plan's, or kept_text's), alive until the edits are applied.
    std::string_view text;
    bool unicode = false;
    uint64_t size() const { return unicode ? 5 + text.size() : text.size(); }
};

// `text` kept as long as the process runs, each distinct text once: the few opcodes retype_storages
// makes (a storage class's GLOBAL) for 100,000 edits.
std::string_view kept_text(std::string text);

// A checkpoint's pickle with edits applied, never held whole: its pieces (runs of the original pickle
// and the edits' bytes, in order) are written straight into the output's record, its size and CRC-32
// taken from them first. A 100,000-key rename held a 13 MiB copy of the pickle before.
class PatchedPickle {
public:
    // `file`, when given, maps `original`: each pass over the pieces gives the pages of the original
    // it has passed back (MappedFile::release), so that a pickle of 16 MiB is not resident beside the
    // writer's tables from its first pass on.
    PatchedPickle(ByteView original, std::vector<PickleEdit> sorted_edits, const MappedFile* file = nullptr);
    uint64_t size() const { return m_size; }
    uint32_t crc32() const;
    // Calls piece(data, size) for each piece, in order.
    void for_each_piece(const std::function<void(const char*, size_t)>& piece) const;

private:
    ByteView m_original;
    const MappedFile* m_file;
    std::vector<PickleEdit> m_edits;
    uint64_t m_size = 0;
};

// The checkpoint's pickle with `edits` applied and its FRAMEs dropped (a legacy pickle's persistent
// ids also lose their sixth item, the view metadata, as the zip format's have none). `c` must be opened with
// trace_pickle and stay open while the result is used. Throws Error(corrupt) for overlapping edits.
PatchedPickle apply_pickle_edits(const Checkpoint& c, std::vector<PickleEdit> edits);

// The edits that make the storages in `retype` (storage index → dtype) referenced by that dtype's
// storage class (FloatStorage → BFloat16Storage): the class pushed for each of their persistent ids
// changes (a GLOBAL's text; for STACK_GLOBAL, the push of its name string), and where a class object
// fetched from the memo is no longer the one a GET's site needs, that GET pushes the class inline.
// Throws Error(unsupported) for a storage whose class is pushed in a way this cannot rewrite.
std::vector<PickleEdit> retype_storages(const Checkpoint& c, const std::unordered_map<size_t, DType>& retype);

// Asked first for each record: input record index, its name in the output; returns true when it
// wrote the record itself.
using CustomRecord = std::function<bool(size_t record, std::string_view name, ZipWriter& w)>;

// The checkpoint written to `fd` as torch writes a zip (STORED, 64-byte aligned): `pickle` for its
// pickle; a zip's records in the same order, copied by the kernel (STORED) or inflated (DEFLATE); a
// legacy file's storages as ROOT/data/KEY records (ROOT: the target's stem) with a version record.
// Returns the file size; `records` gets the record count.
uint64_t write_torch_zip(const Checkpoint& c, const PatchedPickle& pickle, int fd, const std::string& target,
                         size_t& records, const CustomRecord& custom = nullptr);

}  // namespace ckpt
