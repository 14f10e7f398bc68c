// torch.export.save archives (.pt2) of torch 2.1–2.6: a zip whose records sit at its top level,
// not in a folder as torch.save's do:
//   serialized_exported_program.json   the program (graph, signature); not read
//   serialized_state_dict.pt           torch.save of the program's state dict: parameters, buffers
//   serialized_constants.pt            torch.save of its constants (lifted tensors), often an empty dict
//   serialized_example_inputs.pt       torch.save of the example inputs; not weights, not read
//   version                            the schema version ("8.2")
// The two torch.save archives are read where they lie in the file (STORED, as torch writes them) and
// joined as one state dict: what ExportedProgram.state_dict and .constants hold, by their names.
// Later torch writes a different PT2 archive (archive_format "pt2", models/*.json, data/weights/…),
// which is refused with that said. The archive's own records are not the checkpoint's: its records
// are the two archives' (named "serialized_state_dict.pt:archive/data/0" …), as a sharded one's.
#include "formats/format.hpp"
#include "ckpt/error.hpp"
#include "io/mapped_file.hpp"
#include "io/zip.hpp"

namespace ckpt {

namespace {
constexpr const char* k_parts[] = {"serialized_state_dict.pt", "serialized_constants.pt"};
}  // namespace

bool sniff_export(const ZipArchive& zip) {
    return zip.find("serialized_state_dict.pt") || zip.find("serialized_exported_program.json") || zip.find("archive_format");
}

void read_export(Checkpoint::Contents& c, const OpenOptions& options) {
    const ZipArchive& zip = *c.zip;  // read_torch_zip opened it and found no folder
    if (!zip.find("serialized_state_dict.pt"))
        throw Error(ErrorKind::unsupported, "",
                    "a PT2 archive of a newer torch.export (torch ≥ 2.7's layout, no serialized_state_dict.pt) is not read yet");
    c.format = Format::torch_export;
    if (const ZipEntry* v = zip.find("version"); v && v->size <= 64) {
        RecordData d = zip.record_data(*v);
        c.version = std::string(d.view().as_chars());
        while (!c.version.empty() && (c.version.back() == '\n' || c.version.back() == ' ')) c.version.pop_back();
    }
    Value* root = c.arena.make(ValueKind::dict, 0);
    StringIndex seen;
    std::vector<std::string> names;
    auto name_at = [&](size_t i) -> std::string_view { return names[i]; };
    for (const char* part_name : k_parts) {
        const ZipEntry* e = zip.find(part_name);
        if (!e) continue;
        if (e->method != 0)
            throw Error(ErrorKind::unsupported, "", std::string(part_name) + " is compressed in the archive, which torch.export never writes");
        uint64_t at = c.base + zip.data_offset(*e);
        std::unique_ptr<Checkpoint> part = open_embedded(c.file, at, e->size, c.path + ":" + part_name, options);
        const Checkpoint* p = part.get();
        size_t base = c.adopt_part(std::move(part), part_name);
        for (const auto& sd : p->state_dict().entries) {
            const Entry& entry = p->entries()[sd.entry];
            const std::string name(sd.name);
            if (seen.find(name, name_at) != StringIndex::npos) {
                c.problems.push_back({"export_duplicate", name, "tensor " + name + " is in both the state dict and the constants"});
                continue;
            }
            seen.insert(name, names.size(), name_at);
            names.push_back(name);
            Value* key = c.arena.make(ValueKind::string, 0);
            key->set_s(c.arena.own(sd.name));
            Value* tv = c.arena.make(ValueKind::tensor, entry.value->offset);
            tv->set_i(static_cast<int64_t>(base + *entry.tensor));
            tv->set_s(entry.value->s().empty() ? std::string_view() : c.arena.own(entry.value->s()));
            tv->state = entry.value->state;  // the part stays open: its values live as long as this
            c.arena.append_entry(root, key, tv);
        }
    }
    c.root = root;
}

}  // namespace ckpt
