// The checkpoint model: what a file holds, independent of its format. Each format's reader
// (lib/src/formats/) fills it; every command works on it, and never on a format.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/bytes.hpp"
#include "ckpt/dims.hpp"
#include "ckpt/dtype.hpp"
#include "ckpt/globals.hpp"
#include "ckpt/pickle_limits.hpp"
#include "ckpt/value.hpp"

namespace ckpt {

class MappedFile;
class ZipArchive;
class RecordData;
struct PickleTrace;

// Its text is the checkpoint's (its file's mapping, its pickle, or names it keeps): valid while it
// is open. 88 bytes and nothing on the heap: a checkpoint of 100,000 tensors has 100,000 of them.
struct StorageInfo {
    std::string_view key;            // persistent id key ("0")
    std::string_view location;       // "cpu", "cuda:0"
    std::string_view storage_class;  // "torch.FloatStorage"
    std::string_view record;         // "root/data/0"
    uint64_t numel = 0;              // elements (bytes for untyped storages)
    uint64_t record_size = 0;
    DType dtype = DType::untyped;
    bool record_present = false;
    uint64_t nbytes() const { return numel * dtype_size(dtype); }
};

// How a tensor's elements are laid out: torch's layouts, and its nested tensors (a list of tensors of
// different shapes; torch says layout strided or jagged and is_nested).
enum class Layout : uint8_t { strided, sparse_coo, sparse_csr, sparse_csc, sparse_bsr, sparse_bsc, nested, jagged };
const char* layout_name(Layout l);  // "strided", "sparse_coo" …, "strided" for nested, "jagged"
std::optional<Layout> layout_from_name(std::string_view torch_name);  // "torch.sparse_coo", "sparse_csr" …

// A tensor other tensors make up, as torch saves it: a sparse tensor's indices and values, a nested
// tensor's buffer and the sizes, strides and offsets of its components, a quantized tensor's
// parameters. Each part is an ordinary tensor of the checkpoint's table (not an entry of its own).
struct TensorPart {
    std::string_view name;  // "indices", "values", "crow_indices", "buffer", "offsets", "scales" … (static text)
    size_t tensor = 0;      // index into Checkpoint::tensors
};
struct TensorExtra {
    std::vector<TensorPart> parts;
    // nested: each component as a view of the buffer (its shape, stride and offset read from the
    // sizes, strides and offsets parts once the records can be read); index into Checkpoint::tensors
    std::vector<size_t> components;
    // quantized: "per_tensor_affine", "per_channel_affine" … (static text); the scale and zero point
    // of a per-tensor scheme, the axis of a per-channel one (its scales and zero points are parts)
    std::string_view qscheme;
    double scale = 0;
    int64_t zero_point = 0;
    int64_t axis = -1;
    std::string device;  // a tensor saved without its bytes (meta, a wrapper subclass): its device
    // torch ≥ 2.1 saves a sparse COO tensor's is_coalesced flag, which torch 1.13's rebuild refuses
    bool coalesced_flag = false;
};

struct TensorInfo {
    Dims shape;
    Dims stride;
    int64_t storage_offset = 0;  // elements
    size_t storage = 0;          // index into Checkpoint::storages
    std::string_view rebuild;    // the rebuild function ("torch._utils._rebuild_tensor_v2"); static text
    std::string_view subclass;   // tensor subclass for _rebuild_from_type_v2, "" when plain (the checkpoint's text)
    uint64_t numel = 0;
    uint64_t extent = 0;         // elements of the storage the tensor spans from its offset
    // What a tensor that is not a plain view of one storage is made of (null for a plain one); shared
    // by copies of the info, so a reader that renumbers tensors (sharded, merged) copies it first.
    std::shared_ptr<const TensorExtra> extra;
    DType dtype = DType::float32;
    bool requires_grad = false;
    bool is_parameter = false;
    Layout layout = Layout::strided;
    bool no_data = false;        // saved without its elements (the meta device, a wrapper subclass): no storage
    uint64_t nbytes() const { return numel * dtype_size(dtype); }
    bool contiguous() const;
    // A plain view of its storage (`storage`, `storage_offset`, `stride` hold): what readers of
    // elements take as they are. Sparse and nested tensors are read through their parts, a tensor
    // without data not at all.
    bool plain() const { return layout == Layout::strided && !no_data && !extra; }
    bool quantized() const { return extra && !extra->qscheme.empty(); }
    bool nested() const { return layout == Layout::nested || layout == Layout::jagged; }
    // numel and extent from shape, stride and dtype (checked); nullptr, or what is wrong: "negative
    // size or stride", "element count overflows", "tensor extent overflows", "byte size overflows".
    const char* count_elements();
    // Plain or quantized: its elements are a strided view of its storage.
    bool strided_view() const { return layout == Layout::strided && !no_data && (!extra || quantized()); }
    // How many times torch's expand repeats each element: the product of the sizes (> 1) of the
    // dimensions whose stride is 0. 1 for a tensor that repeats nothing.
    uint64_t repeats() const;
    // The tensor without those dimensions: each element it repeats, once (numel / repeats()).
    TensorInfo unrepeated() const;
};

// Readers of a tensor's elements do work in proportion to what the file stores, not to what a view
// makes of it: 823 bytes expanded to 10^12 elements would otherwise be hours of statistics and a
// 3.6 TiB output. A view read element by element may make at most this many times its stored span
// plus k_view_slack elements; past that, stride-0 repeats are accounted for (statistics of the
// elements once, scaled) and any other overlap is refused naming its shape.
constexpr uint64_t k_view_factor = 16;
constexpr uint64_t k_view_slack = uint64_t{1} << 24;
// Whether reading `t` element by element stays within those bounds.
inline bool view_within_bounds(const TensorInfo& t) { return t.numel <= k_view_factor * t.extent + k_view_slack; }

// A leaf of the value tree, by its dotted path from the root object.
// Keys and names are text the checkpoint keeps (with its values): valid while it is open.
struct Entry {
    std::string_view key;
    const Value* value = nullptr;
    std::optional<size_t> tensor;  // index into Checkpoint::tensors when the leaf is a tensor
};

struct StateDictEntry {
    std::string_view name;  // the key a model's load_state_dict sees ("conv1.weight")
    size_t entry = 0;  // index into Checkpoint::entries
};

enum class StateDictKind {
    none,    // no mapping of names to tensors was found
    dict,    // a dict/OrderedDict of name → tensor
    module,  // a pickled nn.Module: names built from _parameters/_buffers/_modules
    tree,    // a TorchScript module: every tensor attribute by its path
};
const char* state_dict_kind_name(StateDictKind k);

struct StateDict {
    StateDictKind kind = StateDictKind::none;
    std::string path;                     // dotted path of the mapping from the root, "" for top level
    std::vector<StateDictEntry> entries;  // tensors, in order
    size_t other_values = 0;              // non-tensor values in the mapping
    bool has_metadata = false;            // OrderedDict carries _metadata (module versions)
    const Value* value = nullptr;
};

struct GlobalRef {
    std::string module, name;
    GlobalClass cls = GlobalClass::unknown;
    uint64_t count = 0;
    uint64_t first_offset = 0;  // file offset of the first opcode naming it
    std::string record;         // the record holding the pickle
    // builtins.getattr whose every use was a bound method of one of torch's classes: how many, and
    // one ("torch.optim.lr_scheduler.OneCycleLR._annealing_cos"); 0 otherwise.
    uint64_t bound_methods = 0;
    std::string bound_method;
    uint64_t instantiated = 0;  // times made by NEWOBJ (cls.__new__), which torch 1.13's weights_only allows Parameter only
    uint64_t first_instantiated = 0;  // file offset of the first
    std::string full_name() const { return module + "." + name; }
};

// What `policy` makes of a global the checkpoint names (scan judges its own the same way).
inline GlobalVerdict judge(const GlobalPolicy& policy, const GlobalRef& g) {
    return g.bound_methods ? bound_method_verdict(g.bound_methods, g.bound_method) : policy.judge(g.module, g.name);
}

// What damage that a second save explains usually means, and its fix: inspect and verify say it.
inline constexpr const char* k_two_writers_advice =
    "two processes saving to one path? Save from one rank only: if dist.get_rank() == 0: torch.save(...)";

struct Problem {
    std::string kind;     // "missing_record", "record_size", "out_of_bounds", "storage_conflict" …
    std::string key;      // the tensor key or record it concerns
    std::string message;
};

// distributed: the merged view of a DeepSpeed or torch.distributed.checkpoint folder (Checkpoint::dist).
// torch_export: a torch.export.save archive (.pt2), its state dict and constants joined.
enum class Format { torch_zip, torchscript, safetensors, legacy, distributed, torch_export };

// A stored byte range of the container: a zip record, a safetensors tensor's bytes, or a legacy
// file's storage (named by its key).
// A byte range of another file that a record is gathered from: distributed training saves a
// tensor in partitions over ranks (DeepSpeed ZeRO) or chunks (torch.distributed.checkpoint), and the
// merged view's record of that tensor is its pieces, in order. `from` != `to`: the bytes are elements
// of `from`, converted to `to` (DeepSpeed's reference merge casts buffers to float32).
struct RecordPiece {
    const MappedFile* file = nullptr;  // a file the checkpoint holds open
    uint64_t offset = 0;  // in that file
    uint64_t length = 0;  // bytes there
    DType from = DType::untyped, to = DType::untyped;  // untyped: copied as they are
};

struct RecordInfo {
    // Lives as long as the checkpoint: in its file's mapping (a zip record's name in the central
    // directory) or in text the checkpoint keeps (Checkpoint::Contents::names).
    std::string_view name;
    uint64_t size = 0;
    bool has_crc = false;  // zip records carry a CRC-32; safetensors has none
    uint32_t crc32 = 0;
    std::vector<RecordPiece> pieces;  // gathered from other files; empty: stored as it is
};

// What a checkpoint that distributed training wrote in many files is (Checkpoint::dist()).
struct DistInfo {
    std::string layout;   // deepspeed-zero1/2/3, dcp, fsdp-local
    std::string writer;   // "DeepSpeed 0.16.5, ZeRO-2, fp32 masters", "torch.distributed.checkpoint (torch 2.4+)"
    std::string dir;      // the folder holding the files
    std::string tag;      // DeepSpeed: the tag folder read ("global_step1000")
    std::string latest;   // DeepSpeed: what `latest` names ("" when there is no such file)
    std::vector<std::string> tags;   // DeepSpeed: every tag folder found
    int world_size = 0;   // data-parallel ranks
    std::vector<std::string> files;  // the files read, relative to dir, in rank order
    uint64_t elements = 0;           // of the merged tensors (a tied name counted once)
    std::vector<std::string> notes;  // what a reader should know (frozen parameters taken from …)
    uint64_t bytes = 0;              // of the files read
    std::string module_states;       // DeepSpeed ZeRO-1/2: the file of the module weights (relative to dir)
    std::vector<std::string> masters;  // DeepSpeed ZeRO-1/2: the state dict's names merged from fp32 partitions
    // Every torch.save archive read (a whole rank file, or a DCP item): file (relative to dir), offset, length.
    struct Archive {
        std::string file;  // relative to dir; "" when dir is itself the file (a .nemo's tar)
        uint64_t offset = 0, length = 0;
        std::string member;  // the archive's name within that file (a tar member), "" when none
    };
    std::vector<Archive> archives;
    // Megatron-LM: the iteration, the model-parallel degrees and the model's shape from `args`.
    std::optional<int64_t> iteration;
    struct Degrees {
        int tensor = 1, pipeline = 1, expert = 1, virtual_pipeline = 1;
    };
    std::optional<Degrees> parallel;
    std::vector<std::pair<std::string, std::string>> model_shape;  // ("layers", "4"), ("vocabulary", "60 padded to 64") …
    // Tensors stored more than once that must be equal (a replicated norm on every tensor-parallel
    // rank, a tied copy): each copy's bytes, named by where it is; verify compares them.
    struct Replica {
        std::string name;
        std::vector<std::string> where;
        std::vector<std::vector<RecordPiece>> copies;
        uint64_t size = 0;  // bytes of each copy
        DType dtype = DType::untyped;
    };
    std::vector<Replica> replicas;
};
const char* format_name(Format f);

struct OpenOptions {
    std::optional<std::string> state_dict_key;  // --state-dict-key
    std::optional<std::string> tag;             // --tag: a DeepSpeed folder's tag to read (default: `latest`)
    PickleLimits pickle_limits;
    bool trace_pickle = false;  // keep a PickleTrace (for writers that patch data.pkl)
    // --unpad-vocab: Megatron's word embeddings and output layer cut to this many rows (0: the
    // vocab_size its args record); refused for other inputs.
    std::optional<int64_t> unpad_vocab;
};

class Checkpoint {
public:
    // Reads the container directory and runs the pickle: no tensor bytes are touched.
    // Throws Error for anything that cannot be read (with the path filled in).
    static std::unique_ptr<Checkpoint> open(const std::string& path, const OpenOptions& options = {});
    ~Checkpoint();

    const std::string& path() const;
    uint64_t file_size() const;
    Format format() const;
    const std::string& zip_root() const;
    const std::string& byteorder() const;
    bool byteorder_recorded() const;
    const std::string& version() const;
    // legacy: the sys_info type sizes the writer recorded (short, int, long).
    const std::vector<std::pair<std::string, int>>& type_sizes() const;
    uint8_t pickle_protocol() const;
    // Bytes of what describes the tensors: the pickle of a torch.save file, the JSON header of a
    // safetensors file.
    uint64_t metadata_size() const;
    size_t record_count() const;
    size_t compressed_records() const;
    bool zip64() const;

    const Value* root() const;
    const std::vector<StorageInfo>& storages() const;
    const std::vector<TensorInfo>& tensors() const;
    const std::vector<Entry>& entries() const;
    const StateDict& state_dict() const;
    const std::vector<GlobalRef>& globals() const;
    const std::vector<Problem>& problems() const;
    // What only the records' frames show, checked now without reading any record's data
    // (ZipArchive::frame_problem of every zip record, a sharded checkpoint's shards' too; nothing in
    // other formats), key the record's name, in file order. Kind "record_header": the local header
    // is broken, so the data cannot be found; "record_descriptor": the data is there, but the CRC-32
    // after it is another save's. Cheap: two small reads a record.
    std::vector<Problem> frame_problems() const;
    // The records under ROOT/data/ that no storage names, in file order (a torch.save file has none:
    // another save left them).
    std::vector<size_t> unreferenced_records() const;

    // Number of distinct tensors (by rebuild object) viewing each storage.
    std::vector<size_t> storage_users() const;
    // Bytes a tensor's elements take in the file: a plain or quantized tensor's own (numel × element
    // size), a sparse or nested tensor's parts', 0 for one saved without its elements.
    uint64_t tensor_bytes(const TensorInfo& t) const;
    // The shapes of a nested tensor's components, in order (empty for any other tensor).
    std::vector<std::vector<int64_t>> component_shapes(const TensorInfo& t) const;

    // The container's records, in file order, and their bytes (a view into the mapping, or inflated).
    const std::vector<RecordInfo>& records() const;
    RecordData record_data(size_t record) const;
    std::optional<size_t> record_index(std::string_view name) const;
    // The record of a storage (Checkpoint::storages' index): record_index of its name, looked up once
    // when the checkpoint opened (the names are the zip directory's, whose pages the open gave back).
    std::optional<size_t> storage_record(size_t storage) const;
    // Where a record's bytes start in the file, when they are stored there as they are (not
    // DEFLATE): what the kernel can copy from without the bytes passing through this process.
    std::optional<uint64_t> record_file_offset(size_t record) const;
    // The file holding a record's bytes: the input itself, or for a sharded checkpoint its shard.
    const MappedFile& record_file(size_t record) const;
    // A sharded checkpoint (opened from a Hugging Face *.index.json, or a directory holding one):
    // its shards, in the order the index names them; empty for a single file.
    const std::vector<std::string>& shards() const;
    // Every file this checkpoint is read from: the file itself, a sharded checkpoint's shards, a
    // distributed folder's rank files (what no output may be written over: check_output).
    std::vector<std::string> files_read() const;

    // A checkpoint of distributed training (a DeepSpeed or torch.distributed.checkpoint folder),
    // opened as its merged view: its tensors are whole, their records gathered from pieces of the
    // files it holds open (RecordInfo::pieces).
    const std::optional<DistInfo>& dist() const;

    // safetensors' __metadata__ (empty for other formats).
    const std::vector<std::pair<std::string, std::string>>& metadata() const;

    // For writers: the container, the input and the pickle as read. zip() throws for safetensors.
    const MappedFile& file() const;
    const ZipArchive& zip() const;
    ByteView pickle_bytes() const;
    // Each opcode of that pickle, with where in it it first is, in the order of first use (as the
    // pickle ran: no second walk of its bytes).
    const std::vector<std::pair<uint8_t, uint64_t>>& pickle_opcodes() const;
    const std::string& pickle_record() const;
    // Null unless opened with trace_pickle.
    const PickleTrace* pickle_trace() const;
    // A writer done with the trace (its edits made) frees it: 26 MiB for 100,000 tensors, which the
    // write and the read-back that follow allocate again (handing the pages to the kernel and faulting
    // them in again cost more than it saves: malloc_trim, measured).
    void drop_pickle_trace();

    // What a format's reader fills: defined in the library (lib/src/model/contents.hpp), opaque here.
    struct Contents;
    explicit Checkpoint(std::unique_ptr<Contents> contents);
    const Contents& contents() const { return *m; }
    Contents& contents() { return *m; }

private:
    std::unique_ptr<Contents> m;
};

// {64, 3, 7, 7} → "64×3×7×7"; {} → "()"
std::string shape_text(const std::vector<int64_t>& shape);
// A tensor's shape as reports and messages show it: "4×4 sparse_coo", "3×4 meta", "nested 2×3, 4×3",
// "8 qint8 per_tensor_affine".
std::string tensor_shape_text(const Checkpoint& c, const TensorInfo& t);

// True for what Checkpoint::open reads as a sharded checkpoint: a *.index.json, or a directory.
bool is_sharded_index(const std::string& path);

// Dotted path part of a dict key: str keys as they are, ints in decimal, others by repr.
std::string key_part(const Value* key);

}  // namespace ckpt
