#include "formats/deepspeed_folder.hpp"
#include "formats/dist.hpp"
#include "io/json.hpp"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <regex>
#include <unordered_set>

#include "formats/format.hpp"
#include "model/model_builder.hpp"
#include "ckpt/error.hpp"
#include "io/zip.hpp"
#include "base/text_util.hpp"

namespace ckpt {

namespace dist {

bool is_dir(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool is_file(const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::vector<std::string> list_dir(const std::string& dir) {
    std::vector<std::string> out;
    if (DIR* d = ::opendir(dir.c_str())) {
        while (dirent* e = ::readdir(d))
            if (std::string_view(e->d_name) != "." && std::string_view(e->d_name) != "..") out.emplace_back(e->d_name);
        ::closedir(d);
    }
    std::sort(out.begin(), out.end());
    return out;
}

const Value* field(const Value* v, std::string_view name) {
    if (!v) return nullptr;
    if (v->kind == ValueKind::dict) return v->get(name);
    if (v->kind != ValueKind::object || !v->state) return nullptr;
    const Value* s = v->state;
    if (s->kind == ValueKind::dict) return s->get(name);
    if (s->kind == ValueKind::tuple && s->items().size() == 2)  // (state, slotstate)
        for (const Value* half : s->items())
            if (half->kind == ValueKind::dict)
                if (const Value* f = half->get(name)) return f;
    return nullptr;
}

std::optional<int64_t> int_of(const Value* v) {
    if (v && (v->kind == ValueKind::integer || v->kind == ValueKind::boolean)) return v->i();
    return std::nullopt;
}

std::optional<std::string_view> str_of(const Value* v) {
    if (v && v->kind == ValueKind::string) return v->s();
    return std::nullopt;
}

std::optional<std::vector<int64_t>> ints_of(const Value* v) {
    if (!v || (v->kind != ValueKind::tuple && v->kind != ValueKind::list)) return std::nullopt;
    std::vector<int64_t> out;
    for (const Value* x : v->items()) {
        if (x->kind != ValueKind::integer) return std::nullopt;
        out.push_back(x->i());
    }
    return out;
}

std::string class_of(const Value* v) {
    if (!v || v->kind != ValueKind::object || !v->callable() || v->callable()->kind != ValueKind::global) return "";
    return std::string(v->callable()->s()) + "." + std::string(v->callable()->s2);
}

std::string enum_member(const Value* v) {
    if (!v || v->kind != ValueKind::object || !v->args() || v->args()->kind != ValueKind::tuple) return "";
    ValueSpan a = v->args()->items();
    if (v->callable() && v->callable()->kind == ValueKind::global && v->callable()->s2 == "getattr" && a.size() == 2 &&
        a[1]->kind == ValueKind::string)
        return std::string(a[1]->s());  // getattr(EnumClass, 'NAME')
    if (a.size() == 1 && a[0]->kind == ValueKind::integer) return std::to_string(a[0]->i());  // EnumClass(value)
    return "";
}

uint64_t numel(const std::vector<int64_t>& shape) {
    uint64_t n = 1;
    for (int64_t d : shape) n *= static_cast<uint64_t>(d < 0 ? 0 : d);
    return n;
}

std::string shape_text(const std::vector<int64_t>& shape) {
    std::string s = "(";
    for (size_t k = 0; k < shape.size(); ++k) s += (k ? ", " : "") + std::to_string(shape[k]);
    return s + (shape.size() == 1 ? ",)" : ")");
}

std::vector<RecordPiece> Flat::slice(uint64_t start, uint64_t n, DType to, const std::string& what) const {
    if (start > count || n > count - start)
        throw Error(ErrorKind::corrupt, what,
                    "needs elements " + std::to_string(start) + ".." + std::to_string(start + n) + " of a flat vector of " +
                        std::to_string(count) + ": the partitions are short");
    std::vector<RecordPiece> out;
    uint64_t at = 0;
    for (const Run& r : runs) {
        if (n == 0) break;
        if (start >= at + r.count) {
            at += r.count;
            continue;
        }
        uint64_t from = start - at, take = std::min(n, r.count - from);
        uint64_t esz = dtype_size(r.dtype);
        DType target = to == DType::untyped ? r.dtype : to;
        out.push_back({r.file, r.offset + from * esz, take * esz, r.dtype, target});
        start += take;
        n -= take;
        at += r.count;
    }
    return out;
}

}  // namespace dist

DistView::DistView(Checkpoint::Contents& checkpoint, const OpenOptions& opts) : c(checkpoint), options(opts) {
    c.format = Format::distributed;
}

void DistView::adopt(const Checkpoint& part, const std::string& name) {
    m_memo[&part] = Memo{name, {}, {}};
    for (const GlobalRef& g : part.globals()) {
        auto same = std::find_if(c.globals.begin(), c.globals.end(),
                                 [&](const GlobalRef& h) { return h.module == g.module && h.name == g.name; });
        if (same != c.globals.end()) {
            same->count += g.count;
            same->bound_methods += g.bound_methods;
            continue;
        }
        GlobalRef copy = g;
        copy.record = name + ":" + g.record;
        c.globals.push_back(std::move(copy));
    }
    for (const Problem& p : part.problems()) c.problems.push_back({p.kind, name + ":" + p.key, name + ": " + p.message});
    if (std::none_of(c.piece_files.begin(), c.piece_files.end(), [&](const auto& f) { return f == part.contents().file; }))
        c.piece_files.push_back(part.contents().file);
}

namespace {
OpenOptions part_options(const OpenOptions& o) {
    OpenOptions p;
    p.pickle_limits = o.pickle_limits;
    return p;
}
}  // namespace

std::unique_ptr<Checkpoint> DistView::open_part(const std::string& rel) {
    std::unique_ptr<Checkpoint> p = Checkpoint::open(c.dist->dir + "/" + rel, part_options(options));
    if (p->format() != Format::torch_zip && p->format() != Format::legacy)
        throw Error(ErrorKind::format, p->path(), std::string("is ") + format_name(p->format()) + ", not a torch.save file");
    adopt(*p, rel);
    c.dist->archives.push_back({rel, 0, p->file_size()});
    return p;
}

std::unique_ptr<Checkpoint> DistView::open_part(std::shared_ptr<MappedFile> file, const std::string& rel, uint64_t offset,
                                                uint64_t length, bool member) {
    std::string name = member ? rel : rel + "@" + std::to_string(offset);
    std::unique_ptr<Checkpoint> p = open_embedded(std::move(file), offset, length, c.dist->dir + "/" + name, part_options(options));
    adopt(*p, name);
    if (member) c.dist->archives.push_back({"", offset, length, rel});
    else c.dist->archives.push_back({rel, offset, length, ""});
    return p;
}

dist::Run DistView::run_of(const Checkpoint& part, size_t ti, const std::string& what) const {
    const TensorInfo& t = part.tensors()[ti];
    if (!t.plain()) throw Error(ErrorKind::unsupported, part.path(), what + " is not a plain dense tensor (" + tensor_shape_text(part, t) + ")");
    const StorageInfo& st = part.storages()[t.storage];
    if (!t.contiguous()) throw Error(ErrorKind::unsupported, part.path(), what + " is not contiguous");
    auto rec = part.storage_record(t.storage);
    if (!rec || !st.record_present) throw Error(ErrorKind::corrupt, part.path(), what + ": its storage record " + std::string(st.record) + " is missing");
    auto off = part.record_file_offset(*rec);
    if (!off) throw Error(ErrorKind::unsupported, part.path(), what + ": its storage record " + std::string(st.record) + " is compressed");
    uint64_t esz = dtype_size(t.dtype);
    uint64_t end = (static_cast<uint64_t>(t.storage_offset) + t.numel) * esz;
    if (end > part.records()[*rec].size)
        throw Error(ErrorKind::corrupt, part.path(),
                    what + " runs past its storage: needs " + std::to_string(end) + " bytes, record " + std::string(st.record) + " holds " +
                        std::to_string(part.records()[*rec].size));
    return {&part.record_file(*rec), *off + static_cast<uint64_t>(t.storage_offset) * esz, t.numel, t.dtype};
}

size_t DistView::add_tensor(const std::string& name, DType dtype, const std::vector<int64_t>& shape, std::vector<RecordPiece> pieces) {
    TensorInfo t;
    t.dtype = dtype;
    t.shape = shape;
    t.stride.assign(shape.size(), 1);
    for (size_t d = shape.size(); d-- > 1;) t.stride[d - 1] = t.stride[d] * std::max<int64_t>(shape[d], 1);
    t.numel = dist::numel(shape);
    t.extent = t.numel;
    t.rebuild = "torch._utils._rebuild_tensor_v2";
    uint64_t size = t.numel * dtype_size(dtype), got = 0;
    for (const RecordPiece& p : pieces)
        got += p.from != p.to && p.from != DType::untyped ? p.length / dtype_size(p.from) * dtype_size(p.to) : p.length;
    if (got != size)
        throw Error(ErrorKind::corrupt, name,
                    "its pieces hold " + std::to_string(got) + " bytes, its shape " + dist::shape_text(shape) + " needs " + std::to_string(size));
    StorageInfo st;
    st.key = c.keep(std::to_string(c.storages.size()));
    st.dtype = dtype;
    st.numel = t.numel;
    st.location = "cpu";
    st.storage_class = storage_class_of(dtype);
    st.record_present = true;
    st.record_size = size;
    t.storage = c.storages.size();
    c.storages.push_back(std::move(st));
    RecordInfo r;
    r.name = name;
    r.size = size;
    r.pieces = std::move(pieces);
    c.storages.back().record = c.add_record(std::move(r));
    c.tensors.push_back(std::move(t));
    return c.tensors.size() - 1;
}

Value* DistView::tensor(size_t t) {
    Value* v = c.arena.make(ValueKind::tensor, 0);
    v->set_i(static_cast<int64_t>(t));
    v->set_s(c.arena.own(dtype_name(c.tensors[t].dtype)));
    return v;
}

Value* DistView::str(std::string_view text) {
    Value* v = c.arena.make(ValueKind::string, 0);
    v->set_s(c.arena.own(text));
    return v;
}

Value* DistView::integer(int64_t i) { return c.arena.integer(i, 0); }

Value* DistView::dict(bool ordered) {
    Value* v = c.arena.make(ValueKind::dict, 0);
    if (ordered) v->s2 = "collections.OrderedDict";
    return v;
}

Value* DistView::list() { return c.arena.make(ValueKind::list, 0); }

void DistView::set(Value* d, Value* key, Value* v) {
    c.arena.append_entry(d, key, v);
}

void DistView::set(Value* d, std::string_view key, Value* v) { set(d, str(key), v); }

Value* DistView::copy(const Checkpoint& part, const Value* v, DType cast_to) { return copy_value(part, v, cast_to, 0); }

Value* DistView::copy_value(const Checkpoint& part, const Value* v, DType cast_to, int depth) {
    if (!v) return nullptr;
    if (v->kind == ValueKind::none) return c.arena.none();
    if (depth > 2000) throw Error(ErrorKind::limit, part.path(), "value tree nested deeper than 2000 levels");
    Memo& memo = m_memo[&part];
    if (auto done = memo.values.find(v); done != memo.values.end()) return done->second;
    Value* n = c.arena.copy_shell(v);
    memo.values.emplace(v, n);
    if (v->kind == ValueKind::tensor && !part.tensors()[v->i()].plain())  // sparse, nested …: parts to renumber, not merged here
        throw Error(ErrorKind::unsupported, part.path(), "a " + tensor_shape_text(part, part.tensors()[v->i()]) +
                                                              " tensor in a sharded checkpoint's file is not read");
    if (v->kind == ValueKind::tensor || v->kind == ValueKind::storage) {
        size_t ps = v->kind == ValueKind::tensor ? part.tensors()[v->i()].storage : static_cast<size_t>(v->i());
        const StorageInfo& st = part.storages()[ps];
        DType to = cast_to != DType::untyped && st.dtype != DType::untyped ? cast_to : st.dtype;
        auto [it, fresh] = memo.storages.emplace(static_cast<uint64_t>(ps) * 64 + static_cast<uint64_t>(to), c.storages.size());
        if (fresh) {
            auto rec = part.storage_record(ps);
            if (!rec || !st.record_present)
                throw Error(ErrorKind::corrupt, part.path(), "storage " + std::string(st.key) + " has no record " + std::string(st.record));
            auto off = part.record_file_offset(*rec);
            if (!off) throw Error(ErrorKind::unsupported, part.path(), "record " + std::string(st.record) + " is compressed");
            uint64_t size = part.records()[*rec].size;
            StorageInfo ns = st;
            ns.key = c.keep(std::to_string(c.storages.size()));
            ns.location = c.keep(st.location);  // the part's text: this checkpoint may outlive it
            ns.record_present = true;
            ns.dtype = to;
            ns.storage_class = storage_class_of(to);
            ns.record_size = to == st.dtype ? size : size / dtype_size(st.dtype) * dtype_size(to);
            RecordInfo r;
            std::string name = memo.name + ":" + std::string(st.record);
            r.name = name;
            r.size = ns.record_size;
            r.pieces.push_back({&part.record_file(*rec), *off, size, st.dtype, to});
            ns.record = c.add_record(std::move(r));
            c.storages.push_back(std::move(ns));
        }
        if (v->kind == ValueKind::storage) {
            n->set_i(static_cast<int64_t>(it->second));
            return n;
        }
        TensorInfo t = part.tensors()[v->i()];
        t.storage = it->second;
        t.subclass = c.keep(t.subclass);  // the part's text: this checkpoint may outlive it
        if (to != st.dtype) t.dtype = to;
        n->set_i(static_cast<int64_t>(c.tensors.size()));
        n->set_s(c.arena.own(dtype_name(t.dtype)));
        c.tensors.push_back(std::move(t));
        return n;
    }
    for (Value* x : v->items()) c.arena.append_item(n, copy_value(part, x, cast_to, depth + 1));
    ValueSpan kv = v->entries();
    for (size_t k = 0; k + 1 < kv.size(); k += 2) {
        Value* key = copy_value(part, kv[k], cast_to, depth + 1);
        c.arena.append_entry(n, key, copy_value(part, kv[k + 1], cast_to, depth + 1));
    }
    if (v->kind == ValueKind::object) {
        n->set_callable(copy_value(part, v->callable(), cast_to, depth + 1));
        n->set_args(copy_value(part, v->args(), cast_to, depth + 1));
    }
    n->state = copy_value(part, v->state, cast_to, depth + 1);
    return n;
}

void DistView::finish(Value* root, const std::string& state_dict_path) {
    c.root = root;
    OpenOptions o = options;
    if (!o.state_dict_key && !state_dict_path.empty()) o.state_dict_key = state_dict_path;
    ModelBuilder(c, o).build(true);
    if (c.dist) {
        c.dist->elements = 0;
        for (const TensorInfo& t : c.tensors) c.dist->elements += t.numel;
    }
}

std::unique_ptr<Checkpoint::Contents> dist_contents(const std::string& path, const std::string& dir, const char* layout) {
    auto c = std::make_unique<Checkpoint::Contents>();
    c->path = path;
    c->dist = DistInfo{};
    c->dist->dir = dir;
    c->dist->layout = layout;
    return c;
}

bool any_name_matches(const std::string& dir, const std::regex& re) {
    for (const std::string& n : dist::list_dir(dir))
        if (std::regex_match(n, re)) return true;
    return false;
}

DistFileHint dist_file_hint(const Checkpoint& c) {
    size_t flat = 0;
    std::string first;
    for (const auto& e : c.entries()) {
        std::string_view k = e.key;
        size_t dot = k.rfind('.');
        std::string_view last = dot == std::string_view::npos ? k : k.substr(dot + 1);
        if (last == "flat_param" || last == "_flat_param") {
            if (!flat++) first = e.key;
        }
    }
    if (flat)
        return {"fsdp_local",
                "is an FSDP LOCAL_STATE_DICT (" + std::to_string(flat) + " flat parameter" + (flat > 1 ? "s" : "") + ", e.g. " + first +
                    "): each is this rank's share of many parameters concatenated and padded; which parameters, their shapes "
                    "and the padding are kept by the wrapped model (FSDP's FlatParameter), not in the file, so it cannot be "
                    "merged without the model. Save with SHARDED_STATE_DICT (torch.distributed.checkpoint) or FULL_STATE_DICT"};
    for (const GlobalRef& g : c.globals()) {
        std::string n = g.full_name();
        if (n.find("ShardedTensor") != std::string::npos || n == "torch.distributed.tensor.DTensor" ||
            n == "torch.distributed._tensor.api.DTensor" || n == "torch.distributed.tensor._api.DTensor")
            return {"fsdp_sharded_rank",
                    "holds " + n + " values: one rank's SHARDED_STATE_DICT saved with torch.save; each rank's file holds "
                    "only its shards. Save with torch.distributed.checkpoint (dcp.save) and `ckpt-tool merge` the folder"};
    }
    return {};
}

namespace dist {

namespace {
// One run of a chunk: `count` elements that land at `dest` of the full tensor, from `src` of the chunk.
struct Landing {
    uint64_t dest, src, count;
    size_t chunk;
};
}  // namespace

std::vector<RecordPiece> tile_chunks(const std::vector<int64_t>& S, uint64_t esz, const std::vector<Chunk>& chunks, const std::string& where,
                                     const std::string& what) {
    auto bad = [&](const std::string& why) { return Error(ErrorKind::corrupt, where, what + ": " + why); };
    uint64_t numel = dist::numel(S);
    std::vector<uint64_t> stride(S.size(), 1);
    for (size_t d = S.size(); d-- > 1;) stride[d - 1] = stride[d] * static_cast<uint64_t>(S[d]);
    std::vector<Landing> land;
    for (size_t k = 0; k < chunks.size(); ++k) {
        const std::vector<int64_t>&O = chunks[k].offsets, &Z = chunks[k].sizes;
        if (O.size() != S.size() || Z.size() != S.size()) throw bad("chunk " + std::to_string(k) + " has no offsets and sizes of its rank");
        for (size_t d = 0; d < S.size(); ++d)
            if (O[d] < 0 || Z[d] < 0 || O[d] + Z[d] > S[d])
                throw bad("chunk " + std::to_string(k) + " at " + shape_text(O) + " of size " + shape_text(Z) + " runs past the tensor's " + shape_text(S));
        if (chunks[k].run.count != dist::numel(Z))
            throw bad("chunk " + std::to_string(k) + " holds " + std::to_string(chunks[k].run.count) + " elements, its size " + shape_text(Z) + " needs " +
                      std::to_string(dist::numel(Z)));
        if (dist::numel(Z) == 0) continue;
        // The chunk's runs in the full tensor. Past the last dimension it spans only in part (d0 - 1)
        // it spans every dimension whole, so each index of the dimensions before that starts one run
        // of Z[d0 - 1] × (the trailing dimensions' elements); a chunk spanning every dimension is one run.
        size_t d0 = S.size();
        while (d0 > 0 && Z[d0 - 1] == S[d0 - 1]) --d0;
        if (d0 == 0) {
            land.push_back({0, 0, numel, k});
            continue;
        }
        size_t part_dim = d0 - 1;
        uint64_t length = static_cast<uint64_t>(Z[part_dim]) * stride[part_dim], runs = 1;
        for (size_t d = 0; d < part_dim; ++d) runs *= static_cast<uint64_t>(Z[d]);
        std::vector<int64_t> idx(part_dim, 0);
        for (uint64_t r = 0, src = 0; r < runs; ++r, src += length) {
            uint64_t dest = static_cast<uint64_t>(O[part_dim]) * stride[part_dim];
            for (size_t d = 0; d < part_dim; ++d) dest += static_cast<uint64_t>(O[d] + idx[d]) * stride[d];
            land.push_back({dest, src, length, k});
            for (size_t d = part_dim; d-- > 0;) {
                if (++idx[d] < Z[d]) break;
                idx[d] = 0;
            }
        }
    }
    std::sort(land.begin(), land.end(), [](const Landing& a, const Landing& b) { return a.dest < b.dest; });
    std::vector<RecordPiece> pieces;
    uint64_t at = 0;
    for (const Landing& l : land) {
        if (l.dest < at) throw bad("element " + std::to_string(l.dest) + " is in two chunks (they overlap)");
        if (l.dest > at) throw bad("elements " + std::to_string(at) + ".." + std::to_string(l.dest) + " are in no chunk");
        auto emit = [&](const MappedFile* file, uint64_t offset, uint64_t bytes) {
            if (!pieces.empty() && pieces.back().file == file && pieces.back().offset + pieces.back().length == offset)
                pieces.back().length += bytes;  // runs that follow each other in the file: one piece
            else
                pieces.push_back({file, offset, bytes, DType::untyped, DType::untyped});
        };
        const Chunk& ch = chunks[l.chunk];
        if (ch.source.empty()) {
            emit(ch.run.file, ch.run.offset + l.src * esz, l.count * esz);
        } else {  // elements [src, src + count) of the chunk through its source runs
            uint64_t first = 0, want = l.src, left = l.count;
            for (const Run& r : ch.source) {
                if (!left) break;
                if (want >= first + r.count) {
                    first += r.count;
                    continue;
                }
                uint64_t from = want - first, take = std::min(left, r.count - from);
                emit(r.file, r.offset + from * esz, take * esz);
                want += take;
                left -= take;
                first += r.count;
            }
            if (left) throw bad("chunk " + std::to_string(l.chunk) + "'s runs hold fewer elements than its size");
        }
        at += l.count;
    }
    if (at != numel) throw bad("elements " + std::to_string(at) + ".." + std::to_string(numel) + " are in no chunk");
    return pieces;
}

}  // namespace dist

std::string sharded_folder_of(const std::string& path, std::string* what) {
    if (std::string d = deepspeed_folder_of(path); !d.empty()) {
        if (what) *what = "DeepSpeed ZeRO checkpoint";
        return d;
    }
    if (std::string d = megatron_folder_of(path); !d.empty()) {
        if (what) *what = "Megatron-LM save";
        return d;
    }
    if (std::string d = dtensor_folder_of(path); !d.empty()) {
        if (what) *what = "set of per-rank DTensor state dicts";
        return d;
    }
    return "";
}

DistTarget dist_target(const std::string& path) {
    if (nemo_input(path)) return {DistKind::nemo, path};
    if (DistTarget m = megatron_target(path); m.kind != DistKind::none) return m;  // before DCP: torch_dist is DCP inside
    if (dist::is_dir(path)) {
        if (dist::is_file(path + "/.metadata")) return {DistKind::dcp, path};
        if (dtensor_folder(path)) return {DistKind::dtensor, path};
        if (dcp_hf_folder(path)) return {DistKind::dcp_hf, path};
        if (deepspeed_tag_folder(path)) return {DistKind::deepspeed, path};
        if (dist::is_file(path + "/latest")) return {DistKind::deepspeed, path};
        for (const std::string& n : dist::list_dir(path))
            if (dist::is_dir(path + "/" + n) && deepspeed_tag_folder(path + "/" + n)) return {DistKind::deepspeed, path};
        return {};
    }
    std::string base = text::base_name(path);
    if (base == ".metadata" || text::ends_with(base, ".distcp")) return {DistKind::dcp, text::parent_dir(path)};
    return {};
}

std::unique_ptr<Checkpoint> try_open_distributed(const std::string& path, const OpenOptions& options) {
    DistTarget t = dist_target(path);
    switch (t.kind) {
        case DistKind::deepspeed: return open_deepspeed(t.dir, options);
        case DistKind::dcp: return open_dcp(t.dir, options);
        case DistKind::megatron: return open_megatron(t.dir, options);
        case DistKind::nemo: return open_nemo(t.dir, options);
        case DistKind::dtensor: return open_dtensor_files(t.dir, options);
        case DistKind::dcp_hf: return open_dcp_hf(t.dir, options);
        case DistKind::none: break;
    }
    return nullptr;
}

}  // namespace ckpt
