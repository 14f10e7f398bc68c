// The table of formats, and opening one container: the format that sniffs its bytes reads it, then
// the model is built on what it read.
#include <unordered_set>

#include "ckpt/error.hpp"
#include "formats/safetensors.hpp"
#include "formats/format.hpp"
#include "model/model_builder.hpp"
#include "pickle/pickle_ops.hpp"

namespace ckpt {

const std::vector<FileFormat>& file_formats() {
    static const std::vector<FileFormat> k_formats = {
        {"torch-zip", sniff_torch_zip, read_torch_zip},
        {"safetensors", sniff_safetensors, read_safetensors_file},
        {"legacy", sniff_legacy, read_legacy},
    };
    return k_formats;
}

const std::vector<FolderFormat>& folder_formats() {
    // The distributed layouts first: a folder is a Hugging Face index's only when it is none of them.
    static const std::vector<FolderFormat> k_formats = {
        {"distributed", try_open_distributed},
        {"hf-index", try_open_hf_index},
    };
    return k_formats;
}

namespace {

// The first bytes of formats no reader takes, for a clear message.
void reject_other_formats(ByteView file) {
    if (file.size == 0) throw Error(ErrorKind::format, "", "empty file (0 bytes): not a checkpoint");
    if (file.size >= 265 && std::string_view(reinterpret_cast<const char*>(file.data) + 257, 5) == "ustar")
        throw Error(ErrorKind::unsupported, "", "tar-format torch checkpoint (torch < 0.4) is not supported");
    if (file.data[0] == pickle_ops::PROTO)
        throw Error(ErrorKind::format, "", "a bare pickle, not a torch.save checkpoint");
    throw Error(ErrorKind::format, "", "not a PyTorch checkpoint (no zip archive, no known format)");
}

}  // namespace

void read_container(Checkpoint::Contents& c, const OpenOptions& options) {
    ByteView bytes = c.bytes();
    const FileFormat* format = nullptr;
    for (const FileFormat& f : file_formats())
        if (f.sniff(bytes)) {
            format = &f;
            break;
        }
    if (!format) reject_other_formats(bytes);
    format->read(c, options);
    ModelBuilder(c, options).build(true);
    c.index_storage_records();  // where the reader did not (torch_zip.cpp does)
    // The open is done with the zip's central directory (torch_zip.cpp gave it back before the
    // pickle ran, and a storage found by name brought some back; an export archive's reader did
    // not give it back).
    if (c.zip) c.file->release(c.zip->central_directory());
}

std::unique_ptr<Checkpoint> open_embedded(std::shared_ptr<MappedFile> file, uint64_t offset, uint64_t length,
                                          const std::string& name, const OpenOptions& options) {
    auto c = std::make_unique<Checkpoint::Contents>();
    c->path = name;
    if (!file->view().sub(offset, length) || length == 0)
        throw Error(ErrorKind::corrupt, name,
                    "bytes " + std::to_string(offset) + "+" + std::to_string(length) + " lie past the end of " + file->path() + " (" +
                        std::to_string(file->size()) + " bytes): truncated?");
    c->file = std::move(file);
    c->base = offset;
    c->span = length;
    naming_file(name, [&] {
        if (!ZipArchive::sniff(c->bytes()))
            throw Error(ErrorKind::corrupt, name, "holds no torch.save archive at byte " + std::to_string(offset) + " of " + c->file->path());
        read_container(*c, options);
    });
    return std::make_unique<Checkpoint>(std::move(c));
}

}  // namespace ckpt
