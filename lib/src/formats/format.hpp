// One open/sniff interface for every format the tool reads (private to the library). A format is
// one file in formats/ that says whether bytes or a path are its own and reads them into the same
// Checkpoint::Contents; Checkpoint::open asks each in turn. To add a format: a file here with its
// sniff and read, one row in the table of formats.cpp, and its tests (docs/ARCHITECTURE.md).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/contents.hpp"

namespace ckpt {

// A format of one file (or of bytes inside one: a .distcp's archives, an export archive's parts).
struct FileFormat {
    const char* name;
    bool (*sniff)(ByteView bytes);
    // Fills c's container fields (format, records, storages, tensors, root value …) from c.bytes();
    // the model's derived parts (entries, state dict, storage checks) are ModelBuilder's.
    void (*read)(Checkpoint::Contents& c, const OpenOptions& options);
};

// A format of many files, opened from a path (a folder, an index): `try_open` opens the path when it
// is this format's and returns null when it is not (bloaty's TryOpen), so that what it found out about
// the path is not found out twice.
struct FolderFormat {
    const char* name;
    std::unique_ptr<Checkpoint> (*try_open)(const std::string& path, const OpenOptions& options);
};

// In the order they are tried: zip (torch.save, TorchScript, torch.export), safetensors, legacy.
const std::vector<FileFormat>& file_formats();
// Distributed training folders (DeepSpeed, torch.distributed.checkpoint), Hugging Face index.
const std::vector<FolderFormat>& folder_formats();

// The readers, each in its format's file.
bool sniff_torch_zip(ByteView bytes);
void read_torch_zip(Checkpoint::Contents& c, const OpenOptions& options);      // torch_zip.cpp
bool sniff_export(const ZipArchive& zip);                                      // export.cpp
void read_export(Checkpoint::Contents& c, const OpenOptions& options);         // (a zip without a folder)
void read_safetensors_file(Checkpoint::Contents& c, const OpenOptions& options);  // safetensors.cpp
bool sniff_legacy(ByteView bytes);                                             // legacy.cpp
void read_legacy(Checkpoint::Contents& c, const OpenOptions& options);
std::unique_ptr<Checkpoint> try_open_hf_index(const std::string& path, const OpenOptions& options);  // hf_index.cpp
std::unique_ptr<Checkpoint> try_open_distributed(const std::string& path, const OpenOptions& options);  // dist.cpp
std::unique_ptr<Checkpoint> open_deepspeed(const std::string& dir, const OpenOptions& options);  // deepspeed.cpp
std::unique_ptr<Checkpoint> open_dcp(const std::string& dir, const OpenOptions& options);        // dcp.cpp

// Reads the one container at c.bytes(), sniffed among file_formats(), and builds the model on it.
void read_container(Checkpoint::Contents& c, const OpenOptions& options);
// A torch.save zip stored inside another file (a .distcp is a run of them; an export archive holds
// two): `name` for messages.
std::unique_ptr<Checkpoint> open_embedded(std::shared_ptr<MappedFile> file, uint64_t offset, uint64_t length,
                                          const std::string& name, const OpenOptions& options);

}  // namespace ckpt
