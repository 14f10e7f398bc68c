// torch.save's zip archive (torch ≥ 1.6), and TorchScript's, which is one with code: ROOT/data.pkl
// (the object, storages as persistent ids), ROOT/data/KEY (each storage's bytes), ROOT/version,
// ROOT/byteorder; TorchScript adds ROOT/code/ and ROOT/constants.pkl. A zip without a folder is a
// torch.export archive (export.cpp). FORMATS.md has the layout in full.
#include <memory>

#include "ckpt/error.hpp"
#include "formats/format.hpp"
#include "base/text_util.hpp"
#include "formats/torch_hooks.hpp"
#include "io/mapped_file.hpp"

namespace ckpt {

using text::starts_with;

bool sniff_torch_zip(ByteView bytes) { return ZipArchive::sniff(bytes); }

namespace {

// TorchScript's constants.pkl is unpickled by torch::jit::load, whose unpickler trusts the stack:
// a TUPLE2 over one item, a BUILD or NEWOBJ on an empty stack corrupts its heap (SIGABRT, SIGSEGV).
// The archive is read by this VM first, so such a file is a problem named here, and the commands that
// would hand it to LibTorch (a TorchScript reference) refuse it instead.
void check_constants(Checkpoint::Contents& c, const std::string& prefix, const OpenOptions& options) {
    const ZipEntry* e = c.zip->find(prefix + "constants.pkl");
    if (!e) return;
    std::string record(e->name);
    try {
        RecordData d = c.zip->record_data(*e);
        ValueArena arena;
        std::vector<StorageInfo> storages;
        std::vector<TensorInfo> tensors;
        std::vector<GlobalRef> globals;
        std::vector<Problem> problems;
        TorchHooks hooks(arena, storages, tensors, globals, problems, record);
        run_pickle(d.view(), arena, hooks, record, 0, options.pickle_limits);
    } catch (const Error& err) {
        std::string why = err.message();
        if (why.rfind(record + ": ", 0) == 0) why.erase(0, record.size() + 2);
        c.problems.push_back({"malformed_record", record, record + " is no well-formed pickle: " + why});
    }
}

}  // namespace

void read_torch_zip(Checkpoint::Contents& c, const OpenOptions& options) {
    c.zip = std::make_unique<ZipArchive>(ZipArchive::open(c.bytes()));
    const auto& entries = c.zip->entries();
    c.add_zip_records();
    if (entries.empty()) throw Error(ErrorKind::format, "", "an empty zip archive, not a checkpoint");
    std::string_view first = entries.front().name;
    size_t slash = first.find('/');
    if (slash == std::string_view::npos && sniff_export(*c.zip)) {  // its records at the top level, not in a folder
        c.records.clear();
        c.record_by_name = StringIndex();
        c.records_are_zip_entries = false;
        return read_export(c, options);
    }
    if (slash == std::string_view::npos || slash == 0)
        throw Error(ErrorKind::format, "",
                    "zip archive whose first record '" + std::string(first) + "' is not in a folder: not a torch.save file");
    c.zip_root = std::string(first.substr(0, slash));
    std::string prefix = c.zip_root + "/";
    const ZipEntry* pkl = c.zip->find(prefix + "data.pkl");
    if (!pkl)
        throw Error(ErrorKind::format, "", "zip archive without " + prefix + "data.pkl: not a torch.save checkpoint");
    if (c.zip->find(prefix + "constants.pkl") || c.zip->find(prefix + "code/")) c.format = Format::torchscript;
    // One pass over the names: TorchScript's code, and the storages' records by their keys'
    // numbers (torch.save's keys are 0, 1, …), which the storages find below without reading a name.
    const std::string code = prefix + "code/", data = prefix + "data/";
    DecimalIndex record_by_key(entries.size() + 1);
    for (size_t i = 0; i < entries.size(); ++i) {
        std::string_view name = entries[i].name;
        if (starts_with(name, code)) c.format = Format::torchscript;
        if (!starts_with(name, data)) continue;
        auto key = DecimalIndex::number(name.substr(data.size()));
        if (key && record_by_key.covers(*key)) record_by_key.insert(*key, i);
    }

    auto small_text = [&](const std::string& name) -> std::optional<std::string> {
        const ZipEntry* e = c.zip->find(prefix + name);
        if (!e) return std::nullopt;
        if (e->size > 64) throw Error(ErrorKind::corrupt, "", "record " + std::string(e->name) + " is too large");
        RecordData d = c.zip->record_data(*e);
        std::string s(d.view().as_chars());
        while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
        return s;
    };
    c.version = small_text("version").value_or(small_text(".data/version").value_or(""));
    if (auto bo = small_text("byteorder")) {
        c.byteorder = *bo;
        c.byteorder_recorded = true;
        if (*bo != "little" && *bo != "big")
            throw Error(ErrorKind::corrupt, "", "byteorder record says '" + *bo + "'");
    }

    c.pickle = std::make_unique<RecordData>(c.zip->record_data(*pkl));
    uint64_t base = pkl->method == 0 ? c.base + c.zip->data_offset(*pkl) : 0;
    c.metadata_size = c.pickle->view().size;
    c.pickle_record = pkl->name;
    // The open is done with the zip's central directory (its names are read again only where a
    // record is looked up by name, and come back then): 100,000 records' directory is 9 MiB of
    // the file's pages, given back before the pickle runs.
    c.file->release(c.zip->central_directory());
    if (options.trace_pickle) c.trace = std::make_unique<PickleTrace>();
    TorchHooks hooks(c.arena, c.storages, c.tensors, c.globals, c.problems, c.pickle_record);
    hooks.reserve(entries.size());  // a hint: a record per storage, a tensor per storage as a rule
    // The pickle's pages leave this process behind the VM (the values keep copies of its short
    // texts): 100,000 tensors' pickle is 13–16 MiB of the file that is no longer needed once run.
    PickleProgress progress;
    PagesBehind behind(c.file.get(), c.pickle->view());
    progress.reading = [&behind](uint64_t pos) { behind.at(pos); };
    PickleResult r = run_pickle(c.pickle->view(), c.arena, hooks, c.pickle_record, base,
                                options.pickle_limits, c.trace.get(), &progress);
    behind.done();
    hooks.finish();
    if (c.format == Format::torchscript) check_constants(c, prefix, options);
    c.root = r.root;
    c.protocol = r.protocol;
    c.pickle_opcodes = std::move(r.first_opcodes);

    // Each storage's record, and its index (a record is its zip entry here): by the key's number,
    // or by name for a key that is not a small number (the directory's pages then come back until
    // read_container gives them back after the build).
    std::string record = data;  // a record's name, made in one buffer when it is needed
    auto name_of = [&](std::string_view key) -> const std::string& {
        record.resize(data.size());
        return record.append(key);
    };
    bool indexed = c.records_are_zip_entries && entries.size() < Checkpoint::Contents::k_no_record;
    if (indexed) c.storage_records.assign(c.storages.size(), Checkpoint::Contents::k_no_record);
    for (size_t i = 0; i < c.storages.size(); ++i) {
        StorageInfo& s = c.storages[i];
        const ZipEntry* e = nullptr;
        auto key = DecimalIndex::number(s.key);
        if (key && record_by_key.covers(*key)) {
            size_t at = record_by_key.find(*key);
            if (at != DecimalIndex::npos) e = &entries[at];
        } else {
            e = c.zip->find(name_of(s.key));
        }
        if (e) {
            s.record = e->name;  // the directory's text
            s.record_present = true;
            s.record_size = e->size;
            if (indexed) c.storage_records[i] = static_cast<uint32_t>(e - entries.data());
        } else {
            s.record = c.keep(name_of(s.key));
        }
    }
}

}  // namespace ckpt
