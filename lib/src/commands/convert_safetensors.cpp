// convert's safetensors writer, in three steps: plan (which tensors, each distinct view once, in which
// shard at which offset), write (the header, then each tensor's bytes: copied by the kernel, gathered
// from a view, or cast), read back (the output opened again and compared, convert_verify.cpp).
#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "commands/convert_detail.hpp"
#include "ckpt/error.hpp"
#include "io/mapped_file.hpp"
#include "io/output_writer.hpp"
#include "formats/safetensors.hpp"
#include "io/zip.hpp"
#include "stats/tensor_stats.hpp"

namespace ckpt::detail {

namespace {

struct Planned {
    std::string name;
    size_t tensor;
    uint64_t begin = 0, end = 0;  // offsets in the data buffer
};

struct Plan {
    std::vector<std::vector<Planned>> shards;  // each in its written order
    std::vector<std::string> paths;            // a file per shard
    std::string index_path;                    // written when there is more than one shard
    uint64_t total = 0;                        // bytes of tensor data
};

// One entry per distinct view (the others are aliases of the first, in r.deduplicated); shards in
// state-dict order, each at most --max-shard-size (a tensor larger than that gets a shard of its
// own), named as Hugging Face names them; in a shard the widest dtypes first, then by name, as the
// reference library orders them.
Plan plan(const Checkpoint& c, const ConvertRequest& rq, ConvertReport& r) {
    const StateDict& sd = c.state_dict();
    if (sd.kind == StateDictKind::dict)
        for (size_t i = 0; i < sd.value->dict_size(); ++i)
            if (sd.value->dict_key(i)->kind == ValueKind::string && sd.value->dict_value(i)->kind != ValueKind::tensor)
                r.skipped.emplace_back(sd.value->dict_key(i)->s());

    // Two names are one view only when they share a storage: the views of shared storages alone go
    // into the map (a node with a copy of the shape and stride per tensor cost 100,000-tensor files a
    // tenth of convert's time in comparisons).
    using View = std::tuple<size_t, int64_t, std::vector<int64_t>, std::vector<int64_t>, DType>;
    std::map<View, std::string> first_name;
    std::vector<uint32_t> users(c.storages().size());
    for (const auto& entry : sd.entries) {
        size_t storage = c.tensors()[*c.entries()[entry.entry].tensor].storage;
        if (storage < users.size() && users[storage] < 2) ++users[storage];
    }
    std::vector<Planned> planned;
    planned.reserve(sd.entries.size());
    for (const auto& entry : sd.entries) {
        std::string name = written_name(rq, entry.name);
        size_t ti = *c.entries()[entry.entry].tensor;
        const TensorInfo& t = c.tensors()[ti];
        if (name == "__metadata__") throw Error(ErrorKind::unsupported, rq.input, "a tensor named __metadata__ cannot go into safetensors");
        require_plain(rq, t, name, "safetensors");
        if (!safetensors_dtype_name(t.dtype))
            throw Error(ErrorKind::unsupported, rq.input,
                        "tensor " + name + " is " + std::string(dtype_name(t.dtype)) + ", which safetensors cannot hold");
        if (t.storage >= users.size() || users[t.storage] > 1) {
            View v{t.storage, t.storage_offset, t.shape, t.stride, t.dtype};
            auto [it, fresh] = first_name.emplace(v, name);
            if (!fresh) {
                r.deduplicated.push_back({name, it->second});
                continue;
            }
        }
        planned.push_back({name, ti});
        r.made_contiguous += !t.contiguous();
    }
    first_name.clear();  // a node of shapes and strides per tensor, not needed past the plan

    Plan p;
    auto out_bytes = [&](size_t ti) { return c.tensors()[ti].numel * dtype_size(out_dtype(rq, c.tensors()[ti].dtype)); };
    std::vector<uint64_t> sizes;
    for (const Planned& e : planned) {
        sizes.push_back(out_bytes(e.tensor));
        p.total += sizes.back();
    }
    size_t count = 0;
    std::vector<size_t> shard_of_tensor = plan_shards(sizes, rq.max_shard_size, count);
    p.shards.resize(count);
    for (size_t i = 0; i < planned.size(); ++i) p.shards[shard_of_tensor[i]].push_back(std::move(planned[i]));
    r.tensors = planned.size();
    for (size_t n = 0; n < count; ++n) p.paths.push_back(count == 1 ? rq.output : shard_path(rq.output, n, count));
    p.index_path = rq.output + ".index.json";
    if (count > 1) {
        std::vector<std::string> all = p.paths;
        all.push_back(p.index_path);
        check_outputs(c, all, rq.force);
    }
    for (std::vector<Planned>& shard : p.shards) {
        std::stable_sort(shard.begin(), shard.end(), [&](const Planned& a, const Planned& b) {
            uint64_t sa = dtype_size(out_dtype(rq, c.tensors()[a.tensor].dtype)), sb = dtype_size(out_dtype(rq, c.tensors()[b.tensor].dtype));
            return sa != sb ? sa > sb : a.name < b.name;
        });
        uint64_t at = 0;
        for (Planned& e : shard) {
            e.begin = at;
            e.end = at += out_bytes(e.tensor);
        }
    }
    return p;
}

// A shard's __metadata__: "format": "pt"; the input's own (safetensors) carried into every shard,
// an alias entry only into the shard that holds the tensor it names; then the request's.
std::vector<std::pair<std::string, std::string>> shard_metadata(const Checkpoint& c, const ConvertRequest& rq,
                                                                const ConvertReport& r, const std::vector<Planned>& shard,
                                                                const std::unordered_set<std::string>& tensor_names) {
    std::unordered_set<std::string_view> in_shard;  // only for metadata that names tensors
    if (!c.metadata().empty() || !r.deduplicated.empty())
        for (const Planned& p : shard) in_shard.insert(p.name);
    std::vector<std::pair<std::string, std::string>> meta{{"format", "pt"}};
    std::unordered_set<std::string_view> aliases;  // said below, once (an input's own aliases are entries: read_safetensors_file)
    for (const auto& [alias, kept] : r.deduplicated) aliases.insert(alias);
    for (const auto& [k, v] : c.metadata())
        if (!aliases.count(k) && (!tensor_names.count(v) || tensor_names.count(k) || in_shard.count(v))) meta.push_back({k, v});
    for (const auto& [alias, kept] : r.deduplicated)
        if (in_shard.count(kept)) meta.push_back({alias, kept});
    for (const auto& [k, v] : rq.metadata) meta.push_back({k, v});
    return meta;
}

// The header, then every tensor's bytes at its planned offset; returns the file's size.
uint64_t write_shard(const Checkpoint& c, const ConvertRequest& rq, ConvertReport& r, const std::vector<Planned>& shard,
                     const std::vector<std::pair<std::string, std::string>>& metadata, AtomicFile& out,
                     const std::string& path, SourceHashes& source, uint64_t& written, uint64_t total) {
    SafetensorsHeaderWriter header(&metadata);
    for (const Planned& p : shard) {
        const TensorInfo& t = c.tensors()[p.tensor];
        header.add(p.name, out_dtype(rq, t.dtype), t.shape, p.begin, p.end);
        r.cast += out_dtype(rq, t.dtype) != t.dtype;
    }
    std::string head = header.finish();
    OutputWriter w(out.fd(), path);
    w.write(head.data(), head.size());
    uint64_t base = head.size();
    for (const Planned& p : shard) {
        const TensorInfo& t = c.tensors()[p.tensor];
        size_t record = *c.storage_record(t.storage);
        auto in_file = c.record_file_offset(record);
        uint64_t esz = dtype_size(t.dtype);
        DType to = out_dtype(rq, t.dtype);
        w.seek(base + p.begin);
        auto sink = [&](const uint8_t* bytes, size_t len) { w.write(bytes, len); };
        if (to != t.dtype) {
            RecordData data = c.record_data(record);
            source.offer(record, data.view());
            cast_bytes(t, data.view(), to, sink);
        } else if (t.contiguous() && in_file) {  // the kernel copies it
            w.copy(c.record_file(record), *in_file + static_cast<uint64_t>(t.storage_offset) * esz, t.nbytes());
        } else if (!source.stream(record, [&](ByteView run) { sink(run.data, run.size); }, nullptr)) {
            RecordData data = c.record_data(record);  // not merged, or not one tensor's whole record
            source.offer(record, data.view());
            for_each_logical_bytes(t, data.view(), sink);
        }
        written += p.end - p.begin;
        if (rq.progress) rq.progress(written, total);
    }
    w.flush();
    return base + (shard.empty() ? 0 : shard.back().end);
}

}  // namespace

void write_safetensors(std::unique_ptr<Checkpoint> c, const ConvertRequest& rq, ConvertReport& r) {
    Plan p = plan(*c, rq, r);
    const StateDict& sd = c->state_dict();
    std::unordered_set<std::string> tensor_names;  // what an input's own __metadata__ may name
    if (!c->metadata().empty())
        for (const auto& e : sd.entries) tensor_names.insert(written_name(rq, e.name));
    // The index, made before the source may be closed: every state-dict name (aliases under their
    // kept name's shard), in state-dict order.
    std::vector<std::pair<std::string, std::string>> weight_map;
    if (p.shards.size() > 1) {
        std::unordered_map<std::string_view, size_t> shard_of;
        for (size_t n = 0; n < p.shards.size(); ++n)
            for (const Planned& e : p.shards[n]) shard_of.emplace(e.name, n);
        for (const auto& e : sd.entries) {
            std::string name = written_name(rq, e.name);
            auto it = shard_of.find(name);
            if (it != shard_of.end()) weight_map.push_back({name, text::base_name(p.paths[it->second])});
        }
    }

    std::vector<std::unique_ptr<AtomicFile>> files;
    uint64_t written = 0;
    FingerprintOptions hashes;
    hashes.hash_only = true;  // equal hashes are the read-back's test; the statistics would double the cost
    SourceHashes source(*c, hashes, rq.verify);
    for (size_t n = 0; n < p.shards.size(); ++n) {
        files.push_back(std::make_unique<AtomicFile>(p.paths[n]));
        AtomicFile& out = *files.back();
        r.bytes_written += write_shard(*c, rq, r, p.shards[n], shard_metadata(*c, rq, r, p.shards[n], tensor_names), out,
                                       p.paths[n], source, written, p.total);
        out.start_sync();  // the disk writes while the output is read back from the page cache
        if (p.shards.size() == 1 && rq.verify && !rq.dtype) {
            // Without a cast the source's hashes are all the check needs of it: closed before the
            // output is opened, the two are never open at once (100,000 tensors: ~400 MiB each).
            source.get();
            c.reset();
        }
        ConvertRequest shard_rq = rq;
        shard_rq.output = p.paths[n];
        // Its tensors, and the aliases of them its __metadata__ holds (read back as entries).
        size_t entries = p.shards[n].size();
        if (!r.deduplicated.empty()) {
            std::unordered_set<std::string_view> here;
            for (const Planned& e : p.shards[n]) here.insert(e.name);
            for (const auto& [alias, kept] : r.deduplicated) entries += here.count(kept);
        }
        verify_written(c.get(), shard_rq, out, r, entries, source);
    }
    std::unique_ptr<AtomicFile> index;
    if (p.shards.size() > 1) index = write_index(p.index_path, p.total, weight_map, r.bytes_written);
    commit_set(files, index.get(), rq.force);
    r.outputs = p.paths;
    if (index) r.outputs.push_back(p.index_path);
}

}  // namespace ckpt::detail
