// convert's pth writers: a state dict as torch.save writes one (whole or in shards), and a whole
// training checkpoint written again with its storages cast.
#include <algorithm>
#include <functional>
#include <unordered_map>

#include "commands/convert_detail.hpp"
#include "base/text_util.hpp"
#include "ckpt/error.hpp"
#include "io/mapped_file.hpp"
#include "pickle/pickle_writer.hpp"
#include "formats/rewrite.hpp"
#include "stats/torch_backend.hpp"
#include "ckpt/value.hpp"
#include "io/zip.hpp"
#include "io/zip_writer.hpp"

namespace ckpt::detail {

namespace {

struct Item {
    std::string name;
    size_t tensor;
};

// The dtype storage `s` holds: its own, or for an untyped storage the dtype its tensors view it as
// (a typed storage can hold only one).
DType storage_dtype(const Checkpoint& c, const ConvertRequest& rq, size_t s, DType viewed_as,
                    std::unordered_map<size_t, DType>& untyped_as) {
    const StorageInfo& st = c.storages()[s];
    if (st.dtype != DType::untyped) return st.dtype;
    auto [u, first] = untyped_as.emplace(s, viewed_as);
    if (!first && u->second != viewed_as)
        throw Error(ErrorKind::unsupported, rq.input, "storage " + std::string(st.key) + " is viewed as " + std::string(dtype_name(u->second)) +
                                                          " and as " + std::string(dtype_name(viewed_as)) +
                                                          ": a typed storage cannot hold both");
    return viewed_as;
}

// One file as torch.save writes a state dict (a STORED, 64-byte aligned zip: ROOT/data.pkl,
// ROOT/data/N, ROOT/version) holding `items`, every tensor keeping its storage, offset and strides
// (tied weights and views stay shared).
using MakePickle = std::function<std::string(const std::vector<PickledTensor>&)>;

uint64_t write_one(const Checkpoint& c, const ConvertRequest& rq, const std::string& path, const std::vector<Item>& items,
                   AtomicFile& out, ConvertReport& r, uint64_t& done, uint64_t total, SourceHashes& source,
                   const MakePickle& make_pickle = state_dict_pickle) {
    std::string base = base_name(path);
    std::string root = base.substr(0, base.rfind('.') == std::string::npos || base.rfind('.') == 0 ? base.size() : base.rfind('.'));
    std::vector<PickledTensor> pickled;
    std::unordered_map<size_t, size_t> key_of_storage;  // input storage → its record in the output
    std::vector<size_t> storages;
    std::unordered_map<size_t, DType> untyped_as;
    for (const Item& item : items) {
        const TensorInfo& t = c.tensors()[item.tensor];
        auto [it, fresh] = key_of_storage.emplace(t.storage, storages.size());
        if (fresh) storages.push_back(t.storage);
        DType held = storage_dtype(c, rq, t.storage, t.dtype, untyped_as);
        const StorageInfo& st = c.storages()[t.storage];
        uint64_t numel = st.dtype == DType::untyped ? st.record_size / dtype_size(held) : st.numel;
        pickled.push_back({item.name, std::to_string(it->second), out_dtype(rq, t.dtype), numel, t.storage_offset, t.shape, t.stride});
        r.cast += out_dtype(rq, t.dtype) != t.dtype;
    }
    std::string pkl = make_pickle(pickled);
    ZipWriter w(out.fd(), path);
    ByteView pv{reinterpret_cast<const uint8_t*>(pkl.data()), pkl.size()};
    w.add(root + "/data.pkl", pv, crc32_of(pv));
    for (size_t i = 0; i < storages.size(); ++i) {
        size_t record = *c.storage_record(storages[i]);
        const RecordInfo& rec = c.records()[record];
        std::string name = root + "/data/" + std::to_string(i);
        done += rec.size;
        if (rq.progress) rq.progress(done, total);
        DType from = storage_dtype(c, rq, storages[i], DType::untyped, untyped_as);
        if (out_dtype(rq, from) != from) {  // the whole storage cast: every view of it stays a view
            RecordData data = c.record_data(record);
            source.offer(record, data.view());
            std::vector<uint8_t> cast = TorchBackend::get().cast(from, data.view(), data.view().size / dtype_size(from), out_dtype(rq, from));
            ByteView cv{cast.data(), cast.size()};
            w.add(name, cv, crc32_of(cv));
            c.record_file(record).release(data.view());
            continue;
        }
        auto at = c.record_file_offset(record);
        if (at && rec.has_crc) {  // a STORED zip record: the kernel copies it, its CRC is known
            w.add_copy(name, c.record_file(record), *at, rec.size, rec.crc32);
            continue;
        }
        if (!rec.pieces.empty()) {  // merged: gathered a run at a time, the CRC set once written
            w.add_streamed(name, rec.size, [&](auto&& write) {
                uint32_t crc = 0;
                if (!source.stream(record, [&](ByteView run) { write(run.data, run.size); }, &crc)) {
                    RecordData data = c.record_data(record);
                    source.offer(record, data.view());
                    crc = crc32_of(data.view());
                    write(data.view().data, data.view().size);
                }
                return crc;
            });
            continue;
        }
        RecordData data = c.record_data(record);  // safetensors or DEFLATE: the CRC reads it once
        source.offer(record, data.view());
        uint32_t crc = rec.has_crc ? rec.crc32 : 0;
        if (!rec.has_crc) {  // in 64 MiB windows, each released when done: bounded resident memory
            const MappedFile& file = c.record_file(record);
            ByteView v = data.view();
            file.advise_sequential(v);
            for (uint64_t off = 0; off < v.size; off += 64ull << 20) {
                ByteView part{v.data + off, std::min<uint64_t>(64ull << 20, v.size - off)};
                crc = crc32_of(part, crc);
                file.release(part);
            }
        }
        if (at) w.add_copy(name, c.record_file(record), *at, rec.size, crc);
        else w.add(name, data.view(), crc);
        c.record_file(record).release(data.view());
    }
    static const uint8_t version[] = {'3', '\n'};
    w.add(root + "/version", {version, 2}, crc32_of({version, 2}));
    return w.finish();
}

}  // namespace

void write_state_dict_pth(const Checkpoint& c, const ConvertRequest& rq, ConvertReport& r) {
    std::vector<Item> items;
    std::unordered_map<std::string, size_t> by_name;
    for (const auto& e : c.state_dict().entries) {
        by_name.emplace(e.name, *c.entries()[e.entry].tensor);
        items.push_back({written_name(rq, e.name), *c.entries()[e.entry].tensor});
        require_plain(rq, c.tensors()[items.back().tensor], e.name, "a state dict written anew");
    }
    // The aliases safetensors' converters record in __metadata__ (alias → kept name) are entries of
    // the kept tensor already (read_safetensors_file), so shared storage again; the rest of the
    // metadata has no place in a pth file.
    for (const auto& [key, value] : c.metadata()) {
        auto kept = by_name.find(value), alias = by_name.find(key);
        if (kept != by_name.end() && alias != by_name.end() && alias->second == kept->second)
            r.deduplicated.push_back({key, value});
        else if (key != "format")
            r.metadata_dropped.push_back(key);
    }
    // Shards by storage, in first-use order: tensors that share a storage stay in one shard.
    std::unordered_map<size_t, size_t> unit_of;
    std::vector<uint64_t> sizes;
    std::unordered_map<size_t, DType> untyped_as;
    for (const Item& item : items) {
        const TensorInfo& t = c.tensors()[item.tensor];
        if (!unit_of.emplace(t.storage, sizes.size()).second) continue;
        DType held = storage_dtype(c, rq, t.storage, t.dtype, untyped_as);
        uint64_t bytes = c.records()[*c.storage_record(t.storage)].size;
        sizes.push_back(bytes / dtype_size(held) * dtype_size(out_dtype(rq, held)));
    }
    size_t count = 0;
    std::vector<size_t> shard_of_unit = plan_shards(sizes, rq.max_shard_size, count);
    std::vector<std::vector<Item>> shards(count);
    for (const Item& item : items) shards[shard_of_unit[unit_of.at(c.tensors()[item.tensor].storage)]].push_back(item);
    std::vector<std::string> paths;
    for (size_t n = 0; n < count; ++n) paths.push_back(count == 1 ? rq.output : shard_path(rq.output, n, count));
    std::string index_path = rq.output + ".index.json";
    if (count > 1) {
        std::vector<std::string> all = paths;
        all.push_back(index_path);
        check_outputs(c, all, rq.force);
    }

    uint64_t total = 0, done = 0, total_size = 0;
    for (uint64_t s : sizes) total += s;
    std::vector<std::unique_ptr<AtomicFile>> files;
    std::vector<std::pair<std::string, std::string>> weight_map;
    FingerprintOptions hashes;
    hashes.hash_only = true;
    SourceHashes source(c, hashes, rq.verify);
    for (size_t n = 0; n < count; ++n) {
        files.push_back(std::make_unique<AtomicFile>(paths[n]));
        r.bytes_written += write_one(c, rq, paths[n], shards[n], *files.back(), r, done, total, source);
        files.back()->start_sync();  // the disk writes while the output is read back
        ConvertRequest shard_rq = rq;
        shard_rq.output = paths[n];
        verify_written(&c, shard_rq, *files.back(), r, shards[n].size(), source);
        for (const Item& item : shards[n]) {
            const TensorInfo& t = c.tensors()[item.tensor];
            weight_map.push_back({item.name, base_name(paths[n])});
            total_size += t.numel * dtype_size(out_dtype(rq, t.dtype));
        }
    }
    std::unique_ptr<AtomicFile> index;
    if (count > 1) {
        std::unordered_map<std::string, size_t> order;  // the weight map in state-dict order
        for (size_t i = 0; i < items.size(); ++i) order.emplace(items[i].name, i);
        std::sort(weight_map.begin(), weight_map.end(), [&](const auto& a, const auto& b) { return order.at(a.first) < order.at(b.first); });
        index = write_index(index_path, total_size, weight_map, r.bytes_written);
    }
    commit_set(files, index.get(), rq.force);
    r.tensors = c.state_dict().entries.size();
    r.outputs = paths;
    if (index) r.outputs.push_back(index_path);
}

namespace {

// The written file opened again: the same structure (every key, every non-tensor value), and every
// tensor's content hash equal to the source's, or to the source cast again for a cast storage.
void verify_whole(const Checkpoint& c, const ConvertRequest& rq, AtomicFile& out, ConvertReport& r,
                  const std::unordered_map<size_t, DType>& retype, SourceHashes& source) {
    if (!rq.verify) return;
    auto fail = [&](const std::string& why) { read_back_failed(rq, why); };
    std::unique_ptr<Checkpoint> back = reopen_written(rq, out);
    if (!back->problems().empty()) fail(back->problems().front().message);
    if (back->entries().size() != c.entries().size()) fail("a different structure");
    std::unordered_map<std::string, size_t> tensor_of;
    for (size_t i = 0; i < c.entries().size(); ++i) {
        const Entry &a = c.entries()[i], &b = back->entries()[i];
        if (a.key != b.key || a.tensor.has_value() != b.tensor.has_value()) fail("entry " + std::string(a.key) + " differs");
        if (a.tensor) tensor_of.emplace(a.key, *a.tensor);
        else if (repr(a.value, 256) != repr(b.value, 256)) fail(std::string(a.key) + " differs");
    }
    FingerprintOptions so;
    so.all = true;
    so.hash_only = true;
    Fingerprint got = fingerprint(*back, so);
    const Fingerprint& want = source.get();
    if (want.tensors.size() != got.tensors.size()) fail("tensor count differs");
    for (size_t i = 0; i < got.tensors.size(); ++i) {
        const TensorPrint &s = want.tensors[i], &t = got.tensors[i];
        if (s.key != t.key) fail(s.key + " is missing");
        size_t ti = tensor_of.at(s.key);
        const TensorInfo& info = c.tensors()[ti];
        auto to = retype.find(info.storage);
        DType want_dtype = to == retype.end() ? info.dtype : to->second;
        ContentHash want_hash = to == retype.end() ? s.stats.hash : cast_hash(c, ti, want_dtype);
        if (t.dtype != dtype_name(want_dtype) || s.shape != t.shape || t.stats.hash != want_hash) fail(s.key + " differs");
    }
    r.verified = true;
}

}  // namespace

void write_whole_pth(const Checkpoint& c, const ConvertRequest& rq, ConvertReport& r) {
    if (c.format() != Format::torch_zip && c.format() != Format::legacy)
        throw Error(ErrorKind::unsupported, rq.input, "a whole " + std::string(format_name(c.format())) + " checkpoint cannot be written as pth; use --weights-only for its state dict");
    std::unordered_map<size_t, DType> retype;
    const StateDict& sd = c.state_dict();
    if (rq.dtype) {
        if (sd.kind == StateDictKind::none)
            throw Error(ErrorKind::usage, rq.input, "--dtype: no state dict (a mapping of names to tensors) found to cast; name it with --state-dict-key");
        for (const auto& e : sd.entries) {
            const TensorInfo& t = c.tensors()[*c.entries()[e.entry].tensor];
            if (!castable(t.dtype) || t.dtype == *rq.dtype) continue;
            if (c.storages()[t.storage].dtype == DType::untyped)
                throw Error(ErrorKind::unsupported, rq.input, "--dtype: " + std::string(e.name) + " views an untyped storage, which cannot be recast in place; use --weights-only");
            if (t.rebuild != "torch._utils._rebuild_tensor_v2" && t.rebuild != "torch._utils._rebuild_tensor")
                throw Error(ErrorKind::unsupported, rq.input, "--dtype: " + std::string(e.name) + " is rebuilt by " + std::string(t.rebuild) + ", which names its dtype itself; use --weights-only");
            retype[t.storage] = *rq.dtype;
        }
    }
    for (const auto& e : c.entries())
        if (e.tensor) r.tensors += 1, r.cast += retype.count(c.tensors()[*e.tensor].storage);
    PatchedPickle pickle = apply_pickle_edits(c, retype_storages(c, retype));
    // The storage each record holds, when it is cast: by the record's position, which the writer
    // hands over, not by its name (a string made per record to look it up).
    constexpr size_t none = ~size_t{0};
    std::vector<size_t> cast_storage(c.records().size(), none);
    for (const auto& [s, to] : retype)
        if (auto r = c.storage_record(s)) cast_storage[*r] = s;
    uint64_t total = 0, done = 0;
    for (const auto& rec : c.records()) total += rec.size;
    FingerprintOptions hashes;
    hashes.all = true;
    hashes.hash_only = true;
    SourceHashes source(c, hashes, rq.verify);
    AtomicFile out(rq.output);
    size_t records = 0;
    r.bytes_written = write_torch_zip(c, pickle, out.fd(), rq.output, records, [&](size_t record, std::string_view name, ZipWriter& w) {
        done += c.records()[record].size;
        if (rq.progress) rq.progress(done, total);
        size_t storage = cast_storage[record];
        if (storage == none) return false;
        DType from = c.storages()[storage].dtype;
        RecordData data = c.record_data(record);
        std::vector<uint8_t> cast = TorchBackend::get().cast(from, data.view(), data.view().size / dtype_size(from), retype.at(storage));
        ByteView cv{cast.data(), cast.size()};
        w.add(name, cv, crc32_of(cv));
        c.record_file(record).release(data.view());
        return true;
    });
    out.start_sync();  // the disk writes while the output is read back
    verify_whole(c, rq, out, r, retype, source);
    out.commit(rq.force);
    r.outputs = {rq.output};
}

}  // namespace ckpt::detail

namespace ckpt::detail {

// merge's output: the chosen entries of the value tree as one dict, every tensor in it written as
// torch.save writes one (a storage once however many tensors view it), and read back: every
// tensor's content hash equal to the source's at the same place in the tree.
void write_tree_pth(const Checkpoint& c, const ConvertRequest& rq, ConvertReport& r) {
    const Value* root = c.root();
    const StateDict& sd = c.state_dict();
    std::vector<TreeEntry> top;
    std::vector<std::string> source_key;  // the input's dotted path of each top entry
    for (const auto& [out, in] : rq.tree) {
        if (in == "*" || text::ends_with(in, ".*")) {  // every entry of the root, or of a dict of it
            const Value* d = in == "*" ? root : root && root->kind == ValueKind::dict ? root->get(in.substr(0, in.size() - 2)) : nullptr;
            if (!d || d->kind != ValueKind::dict) throw Error(ErrorKind::usage, rq.input, in == "*" ? "its root is not a dict" : "has no dict " + in);
            std::string prefix = in == "*" ? "" : in.substr(0, in.size() - 1);
            for (size_t i = 0; i < d->dict_size(); ++i) {
                top.push_back({key_part(d->dict_key(i)), d->dict_value(i)});
                source_key.push_back(prefix + top.back().key);
            }
            continue;
        }
        const Value* v = root && root->kind == ValueKind::dict ? root->get(in) : nullptr;
        if (!v) throw Error(ErrorKind::usage, rq.input, "has no top-level entry " + in);
        top.push_back({out, v});
        source_key.push_back(in);
    }
    // The tensors in the order the tree is walked, each with its output and input path.
    std::vector<Item> items;
    std::vector<std::string> from;
    std::unordered_map<size_t, size_t> item_of_tensor;
    std::function<void(const Value*, const std::string&, const std::string&, int)> walk =
        [&](const Value* v, const std::string& out, const std::string& in, int depth) {
            if (depth > 1000) return;
            auto join = [](const std::string& a, const std::string& b) { return a.empty() ? b : a + "." + b; };
            if (v->kind == ValueKind::tensor) {
                require_plain(rq, c.tensors()[static_cast<size_t>(v->i())], in, "a state dict written anew");
                item_of_tensor.emplace(static_cast<size_t>(v->i()), items.size());
                items.push_back({out, static_cast<size_t>(v->i())});
                from.push_back(in);
            } else if (v->kind == ValueKind::dict) {
                for (size_t i = 0; i < v->dict_size(); ++i) {
                    if (!tree_writable(v->dict_value(i))) continue;  // left out by the writer too
                    std::string k = key_part(v->dict_key(i));
                    std::string ko = v == sd.value && v->dict_key(i)->kind == ValueKind::string ? written_name(rq, k) : k;
                    walk(v->dict_value(i), join(out, ko), join(in, k), depth + 1);
                }
            } else if (v->kind == ValueKind::list || v->kind == ValueKind::tuple || v->kind == ValueKind::set ||
                       v->kind == ValueKind::frozenset) {
                for (size_t i = 0; i < v->items().size(); ++i)
                    walk(v->items()[i], join(out, std::to_string(i)), join(in, std::to_string(i)), depth + 1);
            }
        };
    for (size_t i = 0; i < top.size(); ++i)
        if (tree_writable(top[i].value)) walk(top[i].value, top[i].key, source_key[i], 0);
    uint64_t total = 0, done = 0;
    std::unordered_map<size_t, bool> counted;
    for (const Item& it : items) {
        size_t s = c.tensors()[it.tensor].storage;
        if (!counted.emplace(s, true).second) continue;
        const StorageInfo& st = c.storages()[s];
        total += st.record_size;
    }
    check_outputs(c, {rq.output}, rq.force);
    FingerprintOptions hashes;
    hashes.hash_only = true;
    hashes.all = true;  // by path in the tree
    SourceHashes source(c, hashes, rq.verify);
    AtomicFile out(rq.output);
    std::vector<std::string> skipped;
    r.bytes_written = write_one(c, rq, rq.output, items, out, r, done, total, source, [&](const std::vector<PickledTensor>& pickled) {
        return tree_pickle(
            top, [&](size_t t) -> const PickledTensor& { return pickled.at(item_of_tensor.at(t)); }, sd.value,
            [&](const std::string& k) { return written_name(rq, k); }, skipped);
    });
    r.skipped = skipped;
    r.tensors = items.size();
    out.start_sync();
    if (rq.verify) {
        std::unique_ptr<Checkpoint> back = reopen_written(rq, out);
        if (!back->problems().empty()) read_back_failed(rq, back->problems().front().message);
        Fingerprint got = fingerprint(*back, hashes);
        const Fingerprint& want = source.get();
        std::unordered_map<std::string_view, const TensorPrint*> src;
        for (const auto& t : want.tensors) src.emplace(t.key, &t);
        std::unordered_map<std::string_view, size_t> item_of_path;
        for (size_t i = 0; i < items.size(); ++i) item_of_path.emplace(items[i].name, i);
        if (got.tensors.size() != items.size())
            read_back_failed(rq, "tensor count " + std::to_string(got.tensors.size()) + ", expected " + std::to_string(items.size()));
        for (const auto& t : got.tensors) {
            auto i = item_of_path.find(t.key);
            if (i == item_of_path.end()) read_back_failed(rq, t.key + " is not in the input");
            auto s = src.find(from[i->second]);
            if (s == src.end()) read_back_failed(rq, t.key + " has no source");
            const TensorInfo& ti = c.tensors()[items[i->second].tensor];
            DType want_dtype = out_dtype(rq, ti.dtype);
            ContentHash want_hash = want_dtype != ti.dtype ? cast_hash(c, items[i->second].tensor, want_dtype) : s->second->stats.hash;
            if (t.dtype != dtype_name(want_dtype) || s->second->shape != t.shape || t.stats.hash != want_hash) read_back_failed(rq, t.key + " differs");
        }
        r.verified = true;
    }
    out.commit(rq.force);
    r.outputs = {rq.output};
}

}  // namespace ckpt::detail
