// Per-rank DTensor files: every rank's torch.save(model.state_dict()) after FSDP2 fully_shard or a
// device mesh, as verl writes them,
//   DIR/model_world_size_W_rank_R.pt     rank R's state dict: DTensor values (a wrapper subclass
//                                        whose state holds `_local_tensor`, this rank's block, and
//                                        `_spec`: the mesh with this rank's `_coordinate_on_dim`, and
//                                        one placement per mesh dimension), plain tensors elsewhere
//   DIR/optim_world_size_W_rank_R.pt, extra_state_world_size_W_rank_R.pt, fsdp_config.json
// joined as DTensor.full_tensor() would: a Shard(d) placement cuts dimension d as torch.chunk does
// (ceil(L / n) per rank, the last ones shorter or empty), Replicate keeps the whole on every rank of
// that mesh dimension (one taken, every copy compared by verify). What the files record does not
// determine — _StridedShard (FSDP2 with tensor parallelism), two mesh dimensions on one tensor
// dimension, Partial (sums not yet reduced) — is refused, never guessed.
#include <map>
#include <regex>
#include <set>

#include "base/text_util.hpp"
#include "ckpt/error.hpp"
#include "formats/dist.hpp"
#include "io/json.hpp"
#include "model/contents.hpp"

namespace ckpt {

namespace {

using dist::field;
using dist::int_of;
using dist::str_of;

const std::regex& model_file() {
    static const std::regex re(R"(model_world_size_(\d{1,6})_rank_(\d{1,6})\.pt)");
    return re;
}

// An attribute of a tensor subclass's saved state: a dict, or (dict or None, slots dict).
const Value* attr(const Value* state, std::string_view name) {
    if (!state) return nullptr;
    if (state->kind == ValueKind::dict) return state->get(name);
    if (state->kind == ValueKind::tuple)
        for (const Value* half : state->items())
            if (half && half->kind == ValueKind::dict)
                if (const Value* f = half->get(name)) return f;
    return nullptr;
}

bool is_dtensor(const Checkpoint& part, const Value* v) {
    return v && v->kind == ValueKind::tensor && text::ends_with(part.tensors()[v->i()].subclass, "DTensor");
}

// This rank's block of a DTensor: its offsets and sizes in the global tensor, from the placements,
// the mesh's shape and this rank's coordinates. `key` names the block's owner among replicas: the
// coordinates on the sharding mesh dimensions.
struct Block {
    std::vector<int64_t> offsets, sizes;
    std::vector<int64_t> key;
    bool replica_root = true;  // coordinate 0 on every Replicate mesh dimension
};

Block block_of(const Checkpoint& part, const Value* v, const std::string& name) {
    const TensorInfo& t = part.tensors()[v->i()];
    auto bad = [&](const std::string& why) { return Error(ErrorKind::corrupt, part.path(), name + ": " + why); };
    const Value* spec = attr(v->state, "_spec");
    const Value* mesh = field(spec, "mesh");
    const Value* placements = field(spec, "placements");
    if (!spec || !mesh || !placements || (placements->kind != ValueKind::tuple && placements->kind != ValueKind::list))
        throw bad("a DTensor without its spec (mesh and placements)");
    const Value* mesh_t = field(mesh, "mesh");
    if (!mesh_t || mesh_t->kind != ValueKind::tensor) throw bad("its device mesh holds no mesh tensor");
    std::vector<int64_t> mesh_shape = part.tensors()[mesh_t->i()].shape;
    auto coords = dist::ints_of(field(mesh, "_coordinate_on_dim"));
    if (!coords) throw bad("its device mesh does not record this rank's coordinates (_coordinate_on_dim): the rank's block is unknown");
    if (coords->size() != mesh_shape.size() || placements->items().size() != mesh_shape.size())
        throw bad("its mesh of " + dist::shape_text(mesh_shape) + " has " + std::to_string(coords->size()) + " coordinates and " +
                  std::to_string(placements->items().size()) + " placements");
    Block b;
    b.offsets.assign(t.shape.size(), 0);
    b.sizes = t.shape;
    std::set<int64_t> sharded;
    for (size_t i = 0; i < mesh_shape.size(); ++i) {
        const Value* p = placements->items()[i];
        std::string cls = dist::class_of(p);
        int64_t n = mesh_shape[i], c = (*coords)[i];
        if (c < 0 || c >= n) throw bad("coordinate " + std::to_string(c) + " on a mesh dimension of " + std::to_string(n));
        if (text::ends_with(cls, ".Replicate")) {
            if (c != 0) b.replica_root = false;
            continue;
        }
        if (text::ends_with(cls, "._StridedShard"))
            throw Error(ErrorKind::unsupported, part.path(),
                        name + " is _StridedShard on mesh dimension " + std::to_string(i) + " (FSDP2 over tensor parallelism): not read yet");
        if (!text::ends_with(cls, ".Shard"))
            throw Error(ErrorKind::unsupported, part.path(),
                        name + " has placement " + (cls.empty() ? repr(p, 40) : cls) + " on mesh dimension " + std::to_string(i) +
                            (text::ends_with(cls, "Partial") ? " (partial sums not yet reduced)" : "") + ": not merged rather than guessed");
        auto d = int_of(field(p, "dim"));
        if (!d || *d < 0 || *d >= static_cast<int64_t>(t.shape.size())) throw bad("a Shard placement of dimension " + repr(field(p, "dim"), 20));
        if (!sharded.insert(*d).second)
            throw Error(ErrorKind::unsupported, part.path(), name + ": two mesh dimensions shard its dimension " + std::to_string(*d) + ": not read yet");
        int64_t L = t.shape[static_cast<size_t>(*d)], chunk = (L + n - 1) / n;  // torch.chunk
        int64_t off = std::min(L, c * chunk), size = std::max<int64_t>(0, std::min(chunk, L - off));
        b.offsets[static_cast<size_t>(*d)] = off;
        b.sizes[static_cast<size_t>(*d)] = size;
        b.key.push_back(c);
    }
    return b;
}

// The runs of a strided view (a local block cut along a dimension other than the first), its
// elements in row-major order, each within its storage's record.
std::vector<dist::Run> runs_of_view(const Checkpoint& part, size_t ti, const std::string& what) {
    const TensorInfo& t = part.tensors()[ti];
    if (!t.plain()) throw Error(ErrorKind::unsupported, part.path(), what + " is not a plain dense tensor");
    auto rec = part.storage_record(t.storage);
    auto base = rec ? part.record_file_offset(*rec) : std::nullopt;
    if (!rec || !base) throw Error(ErrorKind::corrupt, part.path(), what + ": its storage record is missing or compressed");
    uint64_t esz = dtype_size(t.dtype), limit = part.records()[*rec].size / esz;
    std::vector<dist::Run> runs;
    if (t.numel == 0) return runs;
    size_t nd = t.shape.size();
    int64_t inner = nd && t.stride[nd - 1] == 1 ? t.shape[nd - 1] : 1;
    size_t outer_dims = nd && t.stride[nd - 1] == 1 ? nd - 1 : nd;
    if (t.numel / static_cast<uint64_t>(inner) > (1u << 24))
        throw Error(ErrorKind::limit, part.path(), what + " is a strided view of more than 16 Mi runs: not gathered");
    std::vector<int64_t> idx(outer_dims, 0);
    while (true) {
        int64_t at = t.storage_offset;
        for (size_t d = 0; d < outer_dims; ++d) at += idx[d] * t.stride[d];
        if (at < 0 || static_cast<uint64_t>(at) + static_cast<uint64_t>(inner) > limit)
            throw Error(ErrorKind::corrupt, part.path(), what + " views elements past its storage");
        runs.push_back({&part.record_file(*rec), *base + static_cast<uint64_t>(at) * esz, static_cast<uint64_t>(inner), t.dtype});
        size_t d = outer_dims;
        while (d > 0 && ++idx[d - 1] == t.shape[d - 1]) idx[--d] = 0;
        if (d == 0) break;
    }
    return runs;
}

}  // namespace

std::string dtensor_folder_of(const std::string& path) {
    std::smatch m;
    std::string base = text::base_name(path);
    if (!std::regex_match(base, m, model_file()) || !dist::is_file(path)) return "";
    return std::stoi(m[1]) > 1 ? text::parent_dir(path) : "";
}

bool dtensor_folder(const std::string& dir) { return any_name_matches(dir, model_file()); }

std::unique_ptr<Checkpoint> open_dtensor_files(const std::string& dir, const OpenOptions& options) {
    auto contents = dist_contents(dir, dir, "dtensor-per-rank");
    Checkpoint::Contents* c = contents.get();
    DistInfo& info = *c->dist;
    std::map<int, std::string> files;
    int world = 0;
    for (const std::string& n : dist::list_dir(dir)) {
        std::smatch m;
        if (!std::regex_match(n, m, model_file())) continue;
        int w = std::stoi(m[1]), r = std::stoi(m[2]);
        if (world && w != world)
            throw Error(ErrorKind::corrupt, dir + "/" + n, "is of world size " + std::to_string(w) + ", " + files.begin()->second + " of " + std::to_string(world) + ": two runs' files are mixed");
        world = w;
        if (r >= w) throw Error(ErrorKind::corrupt, dir + "/" + n, "is rank " + std::to_string(r) + " of a world of " + std::to_string(w));
        files[r] = n;
    }
    for (int r = 0; r < world; ++r)
        if (!files.count(r))
            throw Error(ErrorKind::corrupt, dir + "/model_world_size_" + std::to_string(world) + "_rank_" + std::to_string(r) + ".pt",
                        "is missing: rank " + std::to_string(r) + " of " + std::to_string(world) + "'s state dict");
    if (dist::is_file(dir + "/fsdp_config.json")) {
        auto j = read_json_file(dir + "/fsdp_config.json");
        if (j && j->is_object() && j->contains("world_size") && (*j)["world_size"].is_number_integer() && (*j)["world_size"].get<int64_t>() != world)
            throw Error(ErrorKind::corrupt, dir + "/fsdp_config.json",
                        "says world_size " + std::to_string((*j)["world_size"].get<int64_t>()) + ", the files are of " + std::to_string(world));
    }
    DistView view(*c, options);
    std::vector<std::unique_ptr<Checkpoint>> parts;
    for (const auto& [r, n] : files) {
        parts.push_back(view.open_part(n));
        info.files.push_back(n);
        info.bytes += parts.back()->file_size();
        const Value* root = parts.back()->root();
        if (!root || root->kind != ValueKind::dict) throw Error(ErrorKind::format, parts.back()->path(), "is not a state dict (a dict of names)");
    }
    const Value* r0 = parts[0]->root();
    for (size_t r = 1; r < parts.size(); ++r)
        if (parts[r]->root()->dict_size() != r0->dict_size())
            throw Error(ErrorKind::corrupt, parts[r]->path(),
                        "holds " + std::to_string(parts[r]->root()->dict_size()) + " entries, " + files.begin()->second + " " + std::to_string(r0->dict_size()) +
                            ": the ranks' state dicts differ");
    Value* sd = view.dict(true);
    size_t dtensors = 0;
    std::string mesh_names;
    for (size_t i = 0; i < r0->dict_size(); ++i) {
        auto k = str_of(r0->dict_key(i));
        if (!k) throw Error(ErrorKind::format, parts[0]->path(), "holds a key that is not a string: not a state dict");
        std::string name(*k);
        std::vector<const Value*> vals;
        for (size_t r = 0; r < parts.size(); ++r) {
            const Value* v = parts[r]->root()->get(name);
            if (!v) throw Error(ErrorKind::corrupt, parts[r]->path(), "has no " + name + ", which " + files.begin()->second + " holds");
            vals.push_back(v);
        }
        const Value* v0 = vals[0];
        if (!is_dtensor(*parts[0], v0)) {
            view.set(sd, name, view.copy(*parts[0], v0));
            if (v0->kind != ValueKind::tensor) continue;
            // A plain tensor (a buffer, a parameter no mesh holds): every rank's copy is compared.
            const TensorInfo& t0 = parts[0]->tensors()[v0->i()];
            DistInfo::Replica rep;
            rep.name = name;
            rep.dtype = t0.dtype;
            for (size_t r = 0; r < parts.size(); ++r) {
                if (vals[r]->kind != ValueKind::tensor || is_dtensor(*parts[r], vals[r]))
                    throw Error(ErrorKind::corrupt, parts[r]->path(), name + " is not a plain tensor there, as in " + files.begin()->second);
                dist::Run run = view.run_of(*parts[r], vals[r]->i(), name);
                if (run.count != t0.numel || run.dtype != t0.dtype)
                    throw Error(ErrorKind::corrupt, parts[r]->path(), name + " differs in shape or dtype from " + files.begin()->second + "'s");
                rep.size = run.count * dtype_size(run.dtype);
                rep.where.push_back(files[static_cast<int>(r)]);
                rep.copies.push_back({{run.file, run.offset, rep.size, DType::untyped, DType::untyped}});
            }
            if (parts.size() > 1) info.replicas.push_back(std::move(rep));
            continue;
        }
        ++dtensors;
        const TensorInfo& g = parts[0]->tensors()[v0->i()];
        std::map<std::vector<int64_t>, size_t> owner;  // the block's key → its chunk
        std::vector<dist::Chunk> chunks;
        std::vector<size_t> chunk_rank;
        std::vector<std::pair<size_t, size_t>> copies;  // (rank, chunk it repeats)
        std::vector<dist::Run> runs(parts.size());
        std::vector<std::vector<dist::Run>> sources(parts.size());  // a repeated block's runs, when strided
        for (size_t r = 0; r < parts.size(); ++r) {
            const Checkpoint& p = *parts[r];
            if (!is_dtensor(p, vals[r])) throw Error(ErrorKind::corrupt, p.path(), name + " is not a DTensor there, as in " + files.begin()->second);
            const TensorInfo& t = p.tensors()[vals[r]->i()];
            if (t.shape != g.shape || t.dtype != g.dtype)
                throw Error(ErrorKind::corrupt, p.path(), name + " is " + std::string(dtype_name(t.dtype)) + " " + dist::shape_text(t.shape) + " there, " +
                                                              std::string(dtype_name(g.dtype)) + " " + dist::shape_text(g.shape) + " in " + files.begin()->second);
            Block b = block_of(p, vals[r], name);
            const Value* local = attr(vals[r]->state, "_local_tensor");
            if (!local || local->kind != ValueKind::tensor) throw Error(ErrorKind::corrupt, p.path(), name + ": a DTensor without its local tensor");
            const TensorInfo& lt = p.tensors()[local->i()];
            if (lt.dtype != g.dtype || lt.shape != b.sizes)
                throw Error(ErrorKind::corrupt, p.path(), name + ": the local tensor is " + std::string(dtype_name(lt.dtype)) + " " + dist::shape_text(lt.shape) +
                                                              ", its placements make this rank's block " + dist::shape_text(b.sizes));
            std::vector<dist::Run> source;
            if (lt.contiguous()) {
                runs[r] = view.run_of(p, local->i(), name + " (local)");
            } else {  // a block of columns (Shard(1) …): saved as a view of the rank's larger storage
                source = runs_of_view(p, local->i(), name + " (local)");
                runs[r] = {source.empty() ? nullptr : source.front().file, source.empty() ? 0 : source.front().offset, lt.numel, lt.dtype};
            }
            if (mesh_names.empty()) mesh_names = repr(field(field(attr(vals[r]->state, "_spec"), "mesh"), "mesh_dim_names"), 60);
            auto [it, fresh] = owner.emplace(b.key, chunks.size());
            if (fresh) {
                chunks.push_back({b.offsets, b.sizes, runs[r], std::move(source)});
                chunk_rank.push_back(r);
            } else {
                copies.emplace_back(r, it->second);
                sources[r] = std::move(source);
            }
        }
        std::vector<RecordPiece> pieces = dist::tile_chunks(g.shape, dtype_size(g.dtype), chunks, dir, name);
        view.set(sd, name, view.tensor(view.add_tensor(name, g.dtype, g.shape, std::move(pieces))));
        for (const auto& [r, k] : copies) {  // a block on several ranks (Replicate): every copy compared with the first
            DistInfo::Replica rep;
            rep.name = name + " block at " + dist::shape_text(chunks[k].offsets);
            rep.dtype = g.dtype;
            rep.size = chunks[k].run.count * dtype_size(g.dtype);
            rep.where = {files[static_cast<int>(chunk_rank[k])], files[static_cast<int>(r)]};
            auto pieces_of = [&](const dist::Run& whole, const std::vector<dist::Run>& strided) {
                std::vector<RecordPiece> out;
                if (strided.empty()) out.push_back({whole.file, whole.offset, rep.size, DType::untyped, DType::untyped});
                for (const dist::Run& x : strided) out.push_back({x.file, x.offset, x.count * dtype_size(x.dtype), DType::untyped, DType::untyped});
                return out;
            };
            rep.copies = {pieces_of(chunks[k].run, chunks[k].source), pieces_of(runs[r], sources[r])};
            info.replicas.push_back(std::move(rep));
        }
    }
    if (!dtensors) throw Error(ErrorKind::format, dir, "its rank files hold no DTensor: nothing tells how they were split");
    info.world_size = world;
    info.writer = "per-rank torch.save of DTensor state dicts (verl's names), mesh " + mesh_names;
    for (const std::string& n : dist::list_dir(dir))
        if (text::starts_with(n, "optim_world_size_")) {
            info.notes.push_back("optimizer state per rank (optim_world_size_*): not merged");
            break;
        }
    Value* root = view.dict();
    view.set(root, "model", sd);
    view.finish(root, "model");
    return std::make_unique<Checkpoint>(std::move(contents));
}

}  // namespace ckpt
