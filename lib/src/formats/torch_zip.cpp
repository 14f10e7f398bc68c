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
    const std::string code = prefix + "code/";
    for (const auto& e : entries)
        if (starts_with(e.name, code)) {
            c.format = Format::torchscript;
            break;
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
    c.root = r.root;
    c.protocol = r.protocol;
    c.pickle_opcodes = std::move(r.first_opcodes);

    std::string record = prefix + "data/";  // each storage's record name, made in one buffer
    const size_t data = record.size();
    for (auto& s : c.storages) {
        record.resize(data);
        record.append(s.key);
        if (const ZipEntry* e = c.zip->find(record)) {
            s.record = e->name;  // the directory's text
            s.record_present = true;
            s.record_size = e->size;
        } else {
            s.record = c.keep(record);
        }
    }
}

}  // namespace ckpt
