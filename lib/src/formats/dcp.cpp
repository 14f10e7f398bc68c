// torch.distributed.checkpoint folders (FSDP SHARDED_STATE_DICT, FSDP2 / DTensor, torchtitan)
// opened as the one state dict dcp_to_torch_save gives.
//
//   DIR/.metadata       a pickle of torch.distributed.checkpoint.metadata.Metadata:
//                         state_dict_metadata  flattened key → TensorStorageMetadata(properties, size,
//                                              chunks=[ChunkStorageMetadata(offsets, sizes)]) | BytesStorageMetadata()
//                         planner_data         flattened key → the path of the original nesting ('model', 'w')
//                         storage_data         MetadataIndex(fqn, offset, index) → _StorageInfo(relative_path, offset, length)
//                         storage_meta         (torch 2.4+)
//   DIR/__R_S.distcp    written by rank R: at each _StorageInfo's (offset, length) a whole torch.save
//                       zip: of a tensor chunk, or of a bytes entry's object
//
// A tensor is its chunks copied to their offsets: each chunk is cut into the runs that are
// contiguous in the full tensor (rows, or whole blocks where a chunk spans the trailing dimensions),
// and the runs, sorted by where they land, must tile the tensor exactly. The nesting is rebuilt
// from planner_data as torch's unflatten_state_dict does (str parts make dicts, int parts lists).
#include <algorithm>
#include <map>
#include <regex>
#include <set>

#include "ckpt/error.hpp"
#include "io/zip.hpp"
#include "pickle/pickle.hpp"
#include "formats/dist.hpp"
#include "formats/format.hpp"
#include "base/text_util.hpp"
#include "formats/torch_hooks.hpp"

namespace ckpt {

namespace {

using dist::field;
using dist::int_of;
using dist::str_of;

std::string ints_text(const std::vector<int64_t>& v) { return dist::shape_text(v); }

// TensorProperties: pickled through __getstate__ as (dtype, layout, requires_grad, memory_format,
// pin_memory); older writers used the dataclass dict.
std::optional<DType> properties_dtype(const Value* props) {
    if (!props) return std::nullopt;
    const Value* d = nullptr;
    if (props->state && props->state->kind == ValueKind::tuple && !props->state->items().empty()) d = props->state->items()[0];
    else d = field(props, "dtype");
    if (d && d->kind == ValueKind::dtype) return dtype_from_name(d->s2);
    return std::nullopt;
}

}  // namespace

DcpFolder read_dcp(DistView& view, const std::string& dir) {
    Checkpoint::Contents* c = &view.c;
    DistInfo& info = *c->dist;
    const OpenOptions& options = view.options;
    DcpFolder out;
    const std::string meta_path = dir + "/.metadata";
    auto meta_file = std::make_shared<MappedFile>(meta_path);
    info.files.push_back(".metadata");
    info.bytes += meta_file->size();
    std::vector<StorageInfo> no_storages;
    std::vector<TensorInfo> no_tensors;
    std::vector<Problem> meta_problems;
    const Value* meta = nullptr;
    try {
        TorchHooks hooks(c->arena, no_storages, no_tensors, c->globals, meta_problems, ".metadata");
        PickleResult r = run_pickle(meta_file->view(), c->arena, hooks, ".metadata", 0, options.pickle_limits);
        hooks.finish();
        meta = r.root;
    } catch (const Error& e) {
        throw e.with_path(meta_path);
    }
    for (GlobalRef& g : c->globals) g.record = ".metadata";
    auto bad = [&](const std::string& why) { return Error(ErrorKind::corrupt, meta_path, why); };
    if (dist::class_of(meta).find("Metadata") == std::string::npos && !field(meta, "state_dict_metadata"))
        throw Error(ErrorKind::format, meta_path, "is not torch.distributed.checkpoint's Metadata (it holds " + repr(meta, 60) + ")");
    const Value* sdm = field(meta, "state_dict_metadata");
    const Value* planner = field(meta, "planner_data");
    const Value* storage = field(meta, "storage_data");
    if (!sdm || sdm->kind != ValueKind::dict) throw bad("has no state_dict_metadata");
    if (!storage || storage->kind != ValueKind::dict) throw bad("has no storage_data (where each item is stored)");

    // Where each item is: (fqn, chunk offsets) → (file, offset, length); bytes entries have no offsets.
    struct Stored {
        std::string file;
        uint64_t offset, length;
    };
    std::map<std::pair<std::string, std::vector<int64_t>>, Stored> where;
    for (size_t i = 0; i < storage->dict_size(); ++i) {
        const Value* k = storage->dict_key(i);
        const Value* v = storage->dict_value(i);
        auto fqn = str_of(field(k, "fqn"));
        auto rel = str_of(field(v, "relative_path"));
        auto off = int_of(field(v, "offset"));
        auto len = int_of(field(v, "length"));
        if (!fqn || !rel || !off || !len || *off < 0 || *len <= 0) throw bad("storage_data entry " + std::to_string(i) + " is not (fqn, offset) → (file, offset, length)");
        std::string file(*rel);
        if (file.empty() || file.find('/') != std::string::npos || file == "..") throw bad("storage_data names \"" + file + "\", not a file of the folder");
        std::vector<int64_t> at = dist::ints_of(field(k, "offset")).value_or(std::vector<int64_t>{});
        where[{std::string(*fqn), at}] = {file, static_cast<uint64_t>(*off), static_cast<uint64_t>(*len)};
    }
    std::map<std::string, std::shared_ptr<MappedFile>> files;
    auto file_of = [&](const std::string& rel, const std::string& fqn) -> std::shared_ptr<MappedFile> {
        auto it = files.find(rel);
        if (it != files.end()) return it->second;
        if (!dist::is_file(dir + "/" + rel))
            throw Error(ErrorKind::io, dir + "/" + rel, "is missing: .metadata stores " + fqn + " in it");
        auto f = std::make_shared<MappedFile>(dir + "/" + rel);
        info.bytes += f->size();
        return files[rel] = f;
    };

    // The writer: where TensorProperties lived tells the era, storage_meta came with 2.4.
    bool old_props = false;
    for (const GlobalRef& g : c->globals)
        if (g.name == "TensorProperties" && g.module.find("_shard") != std::string::npos) old_props = true;
    info.writer = std::string("torch.distributed.checkpoint (torch ") +
                  (old_props ? "2.0–2.2" : field(meta, "storage_meta") ? "2.4+" : "2.3") + ")";

    std::set<int> ranks;
    static const std::regex distcp(R"(__(\d+)_(\d+)\.distcp)");
    for (const std::string& n : dist::list_dir(dir)) {
        std::smatch m;
        if (std::regex_match(n, m, distcp)) ranks.insert(std::stoi(m[1]));
    }
    info.world_size = ranks.empty() ? 0 : *ranks.rbegin() + 1;

    for (size_t i = 0; i < sdm->dict_size(); ++i) {
        auto fqn_v = str_of(sdm->dict_key(i));
        if (!fqn_v) throw bad("state_dict_metadata has a key that is not a str");
        std::string fqn(*fqn_v);
        const Value* md = sdm->dict_value(i);
        std::string cls = dist::class_of(md);
        if (text::ends_with(cls, "BytesStorageMetadata")) {
            auto it = where.find({fqn, {}});
            if (it == where.end()) throw bad("stores no bytes for " + fqn);
            auto part = view.open_part(file_of(it->second.file, fqn), it->second.file, it->second.offset, it->second.length);
            out.items.push_back({fqn, view.copy(*part, part->root()), DType::untyped, {}, {}});
            view.forget(*part);
            continue;
        }
        if (!text::ends_with(cls, "TensorStorageMetadata")) throw bad(fqn + " is described by " + (cls.empty() ? repr(md, 60) : cls) + ", not a tensor or bytes entry");
        std::optional<DType> dtype = properties_dtype(field(md, "properties"));
        auto shape = dist::ints_of(field(md, "size"));
        const Value* chunks = field(md, "chunks");
        if (!dtype) throw bad(fqn + ": its properties name no dtype");
        if (!shape) throw bad(fqn + ": no size");
        if (!chunks || chunks->kind != ValueKind::list) throw bad(fqn + ": no chunks");
        const std::vector<int64_t>& S = *shape;
        std::vector<dist::Chunk> placed;
        for (size_t k = 0; k < chunks->items().size(); ++k) {
            const Value* ch = chunks->items()[k];
            auto O = dist::ints_of(field(ch, "offsets")), Z = dist::ints_of(field(ch, "sizes"));
            if (!O || !Z || O->size() != S.size() || Z->size() != S.size()) throw bad(fqn + ": chunk " + std::to_string(k) + " has no offsets and sizes of its rank");
            auto it = where.find({fqn, *O});
            if (it == where.end()) throw bad(fqn + ": chunk " + std::to_string(k) + " at " + ints_text(*O) + " is stored nowhere (storage_data)");
            const Stored& st = it->second;
            auto part = view.open_part(file_of(st.file, fqn), st.file, st.offset, st.length);
            const Value* t = part->root();
            if (!t || t->kind != ValueKind::tensor) throw Error(ErrorKind::corrupt, dir + "/" + st.file, "holds no tensor at byte " + std::to_string(st.offset) + " (chunk of " + fqn + ")");
            const TensorInfo& ti = part->tensors()[t->i()];
            if (ti.dtype != *dtype || ti.shape != *Z)
                throw Error(ErrorKind::corrupt, dir + "/" + st.file,
                            "chunk of " + fqn + " at byte " + std::to_string(st.offset) + " is " + std::string(dtype_name(ti.dtype)) + " " +
                                ints_text(ti.shape) + ", .metadata says " + std::string(dtype_name(*dtype)) + " " + ints_text(*Z));
            placed.push_back({*O, *Z, view.run_of(*part, t->i(), fqn + " chunk " + std::to_string(k))});
            view.forget(*part);
        }
        std::vector<RecordPiece> pieces = dist::tile_chunks(S, dtype_size(*dtype), placed, dir + "/.metadata", fqn);
        out.items.push_back({fqn, nullptr, *dtype, S, std::move(pieces)});
    }
    for (const auto& [rel, f] : files) info.files.push_back(rel);
    out.planner = planner;
    out.meta = meta;
    return out;
}

std::unique_ptr<Checkpoint> open_dcp(const std::string& dir, const OpenOptions& options) {
    auto contents = std::make_unique<Checkpoint::Contents>();
    Checkpoint::Contents* c = contents.get();
    c->path = dir;
    c->dist = DistInfo{};
    c->dist->dir = dir;
    c->dist->layout = "dcp";
    DistView view(*c, options);
    DcpFolder folder = read_dcp(view, dir);
    const Value* planner = folder.planner;
    auto bad = [&](const std::string& why) { return Error(ErrorKind::corrupt, dir + "/.metadata", why); };
    // The nesting: planner_data's path per key, str parts dicts and int parts lists.
    Value* root = view.dict();
    std::map<std::pair<const Value*, std::string>, Value*> child;  // container, key → its value
    auto key_text = [](const Value* k) { return k->kind == ValueKind::integer ? "#" + std::to_string(k->i()) : std::string(k->s()); };
    auto place = [&](const std::string& fqn, Value* value) {
        const Value* path = planner && planner->kind == ValueKind::dict ? planner->get(fqn) : nullptr;
        std::vector<const Value*> parts;
        if (path && (path->kind == ValueKind::tuple || path->kind == ValueKind::list)) parts.assign(path->items().begin(), path->items().end());
        for (const Value* p : parts)
            if (p->kind != ValueKind::string && p->kind != ValueKind::integer) throw bad("planner_data's path of " + fqn + " holds " + repr(p, 40));
        if (parts.empty()) parts.push_back(view.str(fqn));
        Value* cur = root;
        auto put = [&](Value* container, const Value* key, Value* v) -> Value* {
            auto [it, fresh] = child.emplace(std::make_pair(container, key_text(key)), v);
            if (!fresh) return it->second;
            if (container->kind == ValueKind::dict) {
                view.set(container, key->kind == ValueKind::string ? view.str(key->s()) : view.integer(key->i()), v);
            } else {
                if (key->kind != ValueKind::integer || key->i() < 0 || key->i() > 1'000'000) throw bad("planner_data's path of " + fqn + " indexes a list with " + repr(key, 40));
                while (container->items().size() <= static_cast<size_t>(key->i())) c->arena.append_item(container, c->arena.none());
                container->set_item(static_cast<size_t>(key->i()), v);
            }
            return v;
        };
        for (size_t i = 0; i + 1 < parts.size(); ++i) {
            Value* fresh = parts[i + 1]->kind == ValueKind::string ? view.dict() : view.list();
            cur = put(cur, parts[i], fresh);
            if (cur->kind != ValueKind::dict && cur->kind != ValueKind::list) throw bad("planner_data nests " + fqn + " inside a value");
        }
        if (put(cur, parts.back(), value) != value) throw bad("planner_data places two keys at the path of " + fqn);
    };

    for (DcpItem& item : folder.items)
        place(item.fqn, item.value ? item.value : view.tensor(view.add_tensor(item.fqn, item.dtype, item.shape, std::move(item.pieces))));
    view.finish(root, "");
    return std::make_unique<Checkpoint>(std::move(contents));
}

}  // namespace ckpt
