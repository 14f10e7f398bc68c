// What a checkpoint holds, as its format's reader fills it (private to the library). A plain struct:
// a reader in formats/ writes its fields, ModelBuilder (model_builder.hpp) derives the entries, the
// storage checks and the state dict from them, and Checkpoint (ckpt/checkpoint.hpp) answers from it.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/checkpoint.hpp"
#include "io/mapped_file.hpp"
#include "pickle/pickle.hpp"
#include "base/string_index.hpp"
#include "io/zip.hpp"

namespace ckpt {

struct Checkpoint::Contents {
    std::string path;
    std::shared_ptr<MappedFile> file;
    uint64_t base = 0, span = 0;  // embedded: the checkpoint is file's bytes [base, base + span)
    // The bytes of this checkpoint's container: the file, or its span of it.
    ByteView bytes() const { return span ? *file->view().sub(base, span) : file->view(); }

    Format format = Format::torch_zip;
    std::unique_ptr<ZipArchive> zip;
    std::string zip_root, byteorder = "little", version;
    bool byteorder_recorded = false;
    std::vector<std::pair<std::string, int>> type_sizes;  // legacy: sys_info's type_sizes

    std::unique_ptr<RecordData> pickle;  // torch.save's pickle as read
    std::vector<std::pair<uint8_t, uint64_t>> pickle_opcodes;  // its PickleResult::first_opcodes (when `pickle` is set)
    std::string pickle_record;
    std::unique_ptr<PickleTrace> trace;
    uint8_t protocol = 0;
    uint64_t metadata_size = 0;  // the pickle's bytes, or a safetensors header's

    ValueArena arena;
    const Value* root = nullptr;
    std::vector<StorageInfo> storages;
    // Each storage's record index (k_no_record: none), filled by the reader that finds the records
    // (torch_zip.cpp) or by index_storage_records after it; until then (a folder's merged view)
    // storage_record looks the name up.
    std::vector<uint32_t> storage_records;
    static constexpr uint32_t k_no_record = UINT32_MAX;
    void index_storage_records();
    std::vector<TensorInfo> tensors;
    std::vector<Entry> entries;
    StateDict state_dict;
    std::vector<GlobalRef> globals;
    std::vector<Problem> problems;
    std::vector<std::pair<std::string, std::string>> metadata;  // safetensors' __metadata__

    // The names the tables view that are not in the file's mapping (RecordInfo::name …): kept
    // apart from the arena's text, which keep_records_only frees.
    TextStore names;
    std::vector<RecordInfo> records;
    std::vector<std::pair<uint64_t, uint64_t>> record_ranges;  // safetensors, legacy: [begin, end) in the file
    StringIndex record_by_name;  // the first record of each name
    // A torch.save archive's records are its zip's entries, in order, and the zip's index finds
    // them: the one index serves both (one of 100,000 names is 2 MiB and a hash of each).
    bool records_are_zip_entries = false;
    void add_zip_records();
    void index_records(size_t from);  // adds records [from, end) to record_by_name
    // Adds a record, keeping a copy of its name in `names` (the name need only live for the call);
    // returns the kept name.
    std::string_view add_record(RecordInfo record);
    // A copy of `text` in `names` (a storage's key or location, a tensor's subclass …), as long-lived
    // as the checkpoint; "cpu" and "" cost nothing.
    std::string_view keep(std::string_view text);
    // The same for a record whose name is in the file's mapping already (a zip directory's).
    void add_record_named_in_file(RecordInfo record);
    // Checkpoint's answers of the same names.
    RecordData record_data(size_t record) const;
    std::optional<size_t> record_index(std::string_view name) const;
    std::optional<uint64_t> record_file_offset(size_t record) const;
    const MappedFile& record_file(size_t record) const;

    // A checkpoint made of others (a sharded checkpoint's shards, an export archive's torch.save
    // archives): `part`'s records, storages, tensors, problems and globals joined under `name`, the
    // part kept open for its records' bytes. Returns the index of its first tensor here.
    size_t adopt_part(std::unique_ptr<Checkpoint> part, const std::string& name);
    // Frees all but what routes a record to its bytes (the records, their ranges, the container and
    // the file): what a part keeps once its tables are joined into the whole's and nothing refers
    // to its values any more. A sharded index of 100,000 tensors held every table twice.
    void keep_records_only();
    std::vector<std::unique_ptr<Checkpoint>> shards;
    std::vector<std::string> shard_names;
    std::vector<std::pair<size_t, size_t>> record_owner;  // sharded: (shard, its record)

    std::optional<DistInfo> dist;
    std::vector<std::shared_ptr<MappedFile>> piece_files;  // the files a merged view's pieces are in

    uint64_t tensor_bytes(const TensorInfo& t) const;  // Checkpoint::tensor_bytes
};

}  // namespace ckpt
