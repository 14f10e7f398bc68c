// Private to the library: what the readers of distributed training's checkpoints share
// (deepspeed.cpp, dcp.cpp): which folder a path names, and reading the objects those
// writers pickle (dataclasses, enums), which are data here and never run.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ckpt/checkpoint.hpp"
#include "io/mapped_file.hpp"
#include "ckpt/value.hpp"

namespace ckpt {

enum class DistKind { none, deepspeed, dcp, megatron, nemo, dtensor, dcp_hf };
struct DistTarget {
    DistKind kind = DistKind::none;
    std::string dir;  // DeepSpeed: the top folder or a tag folder; dcp: the folder of .metadata;
                      // Megatron: the save folder (latest_checkpointed_iteration.txt) or an iteration's
};

// What `path` names: a folder DeepSpeed's save_checkpoint wrote (a `latest`, tag folders of
// *_model_states.pt, or one tag folder), a torch.distributed.checkpoint folder (.metadata), or one
// of DCP's own files (.metadata, *.distcp, which are not checkpoints on their own). A DeepSpeed rank
// file opens as the torch file it is. none for anything else.
DistTarget dist_target(const std::string& path);

// What one plain file says about the distributed training that saved it, when it cannot be used as
// the model's state dict on its own: FSDP's LOCAL_STATE_DICT (a rank's flat parameters) or a rank's
// SHARDED_STATE_DICT saved with torch.save (ShardedTensor / DTensor values). kind "" otherwise.
struct DistFileHint {
    std::string kind;  // "fsdp_local", "fsdp_sharded_rank"
    std::string message;  // reads after the file's name: "is an FSDP LOCAL_STATE_DICT …"
};
DistFileHint dist_file_hint(const Checkpoint& c);

namespace dist {

// A field of a dict (string key), or an attribute of an object as pickle restores it: the BUILD state
// dict, or the (state, slotstate) pair's either half. nullptr when absent.
const Value* field(const Value* v, std::string_view name);
std::optional<int64_t> int_of(const Value* v);
std::optional<std::string_view> str_of(const Value* v);
// A torch.Size, tuple or list of ints.
std::optional<std::vector<int64_t>> ints_of(const Value* v);
// The `module.Name` a value was made from ("" for a plain value).
std::string class_of(const Value* v);
// An enum member as pickle writes one: getattr(EnumClass, 'NAME') or EnumClass(value): its name, or
// its value as text; "" when `v` is neither.
std::string enum_member(const Value* v);

uint64_t numel(const std::vector<int64_t>& shape);
std::string shape_text(const std::vector<int64_t>& shape);
std::vector<std::string> list_dir(const std::string& dir);  // names, sorted; [] when it cannot be read
bool is_dir(const std::string& path);
bool is_file(const std::string& path);

// A run of `count` elements of `dtype` stored one after the other in a file: a 1-D tensor's bytes.
struct Run {
    const MappedFile* file = nullptr;
    uint64_t offset = 0;
    uint64_t count = 0;
    DType dtype = DType::float32;
};

// A block of a tensor (its offsets and sizes per dimension) stored as one contiguous run.
struct Chunk {
    std::vector<int64_t> offsets, sizes;
    Run run;
    // When not empty, the chunk is not one run but these, its elements in row-major order (a strided
    // view: a tensor-parallel rank's columns); `run` then only gives the count and dtype.
    std::vector<Run> source;
};
// The pieces that read a tensor of `shape` (elements of `esz` bytes) in order from its chunks: each
// cut into the runs that are contiguous in the full tensor, which must tile it exactly. Error(corrupt)
// naming `where` for a chunk past the tensor, an overlap or a gap (`what` names the tensor).
std::vector<RecordPiece> tile_chunks(const std::vector<int64_t>& shape, uint64_t esz, const std::vector<Chunk>& chunks, const std::string& where,
                                     const std::string& what);

// A flat vector made of runs in order (a ZeRO group's partitions over the ranks, one rank's groups).
struct Flat {
    std::vector<Run> runs;
    uint64_t count = 0;
    void add(const Run& r) {
        runs.push_back(r);
        count += r.count;
    }
    // Elements [start, start + n) as pieces (cast to `to` unless untyped); throws Error(corrupt) past the end.
    std::vector<RecordPiece> slice(uint64_t start, uint64_t n, DType to, const std::string& what) const;
};

}  // namespace dist

// Builds a Checkpoint that is the merged view of many files (Format::distributed): tensors whose
// records are pieces of those files, and values copied from the checkpoints read to find them. The
// files stay mapped as long as the view lives; the checkpoints read along the way do not.
struct DistView {
    DistView(Checkpoint::Contents& c, const OpenOptions& options);
    Checkpoint::Contents& c;
    const OpenOptions& options;

    // A file of the folder (path relative to DistInfo::dir) as the torch.save checkpoint it is, or
    // a torch.save archive stored at bytes [offset, offset + length) of one (a .distcp item). Its
    // globals and problems become the view's, named by `name`; its mapping is kept for pieces.
    std::unique_ptr<Checkpoint> open_part(const std::string& rel);
    // `member`: the archive is a whole file of its container (a tar's member), named `rel` alone.
    std::unique_ptr<Checkpoint> open_part(std::shared_ptr<MappedFile> file, const std::string& rel, uint64_t offset, uint64_t length,
                                          bool member = false);

    // The bytes of `part`'s tensor `t` as a run: it must be contiguous, and its storage a stored
    // record (torch.save never compresses one). `what` names it in errors.
    dist::Run run_of(const Checkpoint& part, size_t t, const std::string& what) const;
    // A tensor of the view, contiguous, gathered from `pieces`; its index.
    size_t add_tensor(const std::string& name, DType dtype, const std::vector<int64_t>& shape, std::vector<RecordPiece> pieces);
    Value* tensor(size_t t);
    Value* str(std::string_view s);
    Value* integer(int64_t i);
    Value* dict(bool ordered = false);
    Value* list();
    void set(Value* dict, std::string_view key, Value* v);
    void set(Value* dict, Value* key, Value* v);
    // A deep copy of `v`, a value of `part`: its tensors become the view's, each storage once (views
    // and ties stay shared), cast to `cast_to` unless that is untyped (as `.float()` casts).
    Value* copy(const Checkpoint& part, const Value* v, DType cast_to = DType::untyped);
    // Done with `part`: what was copied of it is forgotten (the view's copies stay).
    void forget(const Checkpoint& part) { m_memo.erase(&part); }
    // The value tree is `root`; the state dict is the dict at `state_dict_path` ("" for the root).
    // Counts the view's elements into DistInfo::elements.
    void finish(Value* root, const std::string& state_dict_path);

private:
    // Per part read: its name, and what of it was copied (a part freed and another made at its
    // address starts afresh: adopt forgets the old one's).
    struct Memo {
        std::string name;
        std::unordered_map<const Value*, Value*> values;
        std::unordered_map<uint64_t, size_t> storages;  // its storage (and cast) → the view's
    };
    std::unordered_map<const Checkpoint*, Memo> m_memo;
    Value* copy_value(const Checkpoint& part, const Value* v, DType cast_to, int depth);
    void adopt(const Checkpoint& part, const std::string& name);
};

// The contents of a merged view named `path` (errors, reports), its DistInfo begun: `dir`, `layout`.
std::unique_ptr<Checkpoint::Contents> dist_contents(const std::string& path, const std::string& dir, const char* layout);
// Whether a name in `dir` matches `re` (a layout recognised by its files' names).
bool any_name_matches(const std::string& dir, const std::regex& re);

// A torch.distributed.checkpoint folder's items as stored: each tensor whole (its chunks tiled into
// pieces, checked), each bytes item as the object its archive holds (a copy in the view).
struct DcpItem {
    std::string fqn;
    Value* value = nullptr;  // a bytes item's object; nullptr for a tensor
    DType dtype = DType::untyped;
    std::vector<int64_t> shape;
    std::vector<RecordPiece> pieces;
};
struct DcpFolder {
    std::vector<DcpItem> items;  // in .metadata's order
    const Value* meta = nullptr;     // the Metadata object
    const Value* planner = nullptr;  // its planner_data (the nesting), null when absent
};
// Reads DIR/.metadata and the items it describes into `view` (whose DistInfo names the files read and
// the writer). dcp.cpp places them as dcp_to_torch_save does; megatron.cpp renames them.
DcpFolder read_dcp(DistView& view, const std::string& dir);

// One rank's file of a sharded save beside the save's other rank files: that save's folder (a
// DeepSpeed tag folder, a Megatron iteration folder), "" otherwise. merge reads the folder, inspect
// points there, strip-prefix refuses. `what` (when given) says which ("DeepSpeed ZeRO checkpoint" …).
std::string sharded_folder_of(const std::string& path, std::string* what = nullptr);

// Megatron-LM: the folder that holds `path`'s iteration (a save folder, an iter_N folder), or none.
DistTarget megatron_target(const std::string& path);
std::string megatron_folder_of(const std::string& path);  // model_optim_rng.pt of mp_rank_* beside others: the iteration folder
std::unique_ptr<Checkpoint> open_megatron(const std::string& dir, const OpenOptions& options);  // megatron.cpp
// Per-rank DTensor state dicts (model_world_size_W_rank_R.pt, dtensor.cpp): the folder, one rank's
// file's folder ("" when not one), opened.
bool dtensor_folder(const std::string& dir);
std::string dtensor_folder_of(const std::string& path);
std::unique_ptr<Checkpoint> open_dtensor_files(const std::string& dir, const OpenOptions& options);
// DCP in Hugging Face's storage (shard-RRRRR-model-IIIII-of-NNNNN.safetensors, dcp_hf.cpp).
bool dcp_hf_folder(const std::string& dir);
std::unique_ptr<Checkpoint> open_dcp_hf(const std::string& dir, const OpenOptions& options);
// NeMo: a .nemo file (a tar) or the folder one was extracted to (nemo.cpp).
bool nemo_input(const std::string& path);
std::unique_ptr<Checkpoint> open_nemo(const std::string& path, const OpenOptions& options);

}  // namespace ckpt
