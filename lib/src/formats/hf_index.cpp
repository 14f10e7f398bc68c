// The Hugging Face index format: a *.index.json (or a folder holding one) and the shards it names,
// opened as one checkpoint; and how any checkpoint made of parts joins them (Contents::adopt_part).
#include <dirent.h>
#include "base/string_index.hpp"
#include "base/text_util.hpp"
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "formats/format.hpp"
#include "model/model_builder.hpp"
#include "ckpt/error.hpp"
#include "io/mapped_file.hpp"
#include "io/json.hpp"
#include "io/zip.hpp"

namespace ckpt {

namespace {
using text::ends_with;

// A directory stands for the one Hugging Face index in it.
std::string index_in(const std::string& dir) {
    std::vector<std::string> found;
    if (DIR* d = ::opendir(dir.c_str())) {
        while (dirent* e = ::readdir(d))
            if (ends_with(e->d_name, ".index.json")) found.push_back(e->d_name);
        ::closedir(d);
    }
    if (found.empty())
        throw Error(ErrorKind::format, dir,
                    "is a directory holding no checkpoint this tool reads: no *.index.json (Hugging Face shards), no DeepSpeed "
                    "folder (latest, global_step*/), no torch.distributed.checkpoint folder (.metadata); name a file in it");
    std::sort(found.begin(), found.end());
    if (found.size() > 1)
        throw Error(ErrorKind::usage, dir,
                    "holds " + std::to_string(found.size()) + " index files (" + found[0] + ", " + found[1] + (found.size() > 2 ? ", …" : "") +
                        "): name one");
    return dir + "/" + found.front();
}
}  // namespace

bool is_sharded_index(const std::string& path) {
    struct stat st {};
    return ends_with(path, ".index.json") || (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode));
}

size_t Checkpoint::Contents::adopt_part(std::unique_ptr<Checkpoint> part, const std::string& name) {
    size_t index = shards.size(), storage_base = storages.size(), tensor_base = tensors.size();
    std::string full;  // "shard:record", made in one buffer; add_record keeps its own copy
    for (size_t r = 0; r < part->records().size(); ++r) {
        RecordInfo rec = part->records()[r];
        full.assign(name).append(":").append(rec.name);
        rec.name = full;
        add_record(rec);
        record_owner.push_back({index, r});
    }
    // The part's text goes with it (keep_records_only): what the tables view is kept here.
    for (StorageInfo st : part->storages()) {
        st.key = keep(st.key);
        st.location = keep(st.location);
        st.storage_class = keep(st.storage_class);
        full.assign(name).append(":").append(st.record);
        st.record = keep(full);
        storages.push_back(st);
    }
    for (TensorInfo t : part->tensors()) {
        t.storage += storage_base;
        t.subclass = keep(t.subclass);
        if (t.extra) {  // parts and components are tensors of this part: renumbered as they are
            auto e = std::make_shared<TensorExtra>(*t.extra);
            for (TensorPart& p : e->parts) p.tensor += tensor_base;
            for (size_t& k : e->components) k += tensor_base;
            t.extra = std::move(e);
        }
        tensors.push_back(std::move(t));
    }
    for (const auto& kv : part->metadata())  // safetensors' __metadata__, joined: the first part's value wins
        if (std::none_of(metadata.begin(), metadata.end(), [&](const auto& m) { return m.first == kv.first; }))
            metadata.push_back(kv);
    for (const Problem& p : part->problems()) problems.push_back({p.kind, name + ":" + p.key, name + ": " + p.message});
    for (const GlobalRef& g : part->globals()) {  // one row a name, as in one file; the first place named
        auto same = std::find_if(globals.begin(), globals.end(), [&](const GlobalRef& x) { return x.module == g.module && x.name == g.name; });
        if (same != globals.end()) {
            same->count += g.count;
            continue;
        }
        globals.push_back(g);
        globals.back().record = name + ":" + g.record;
    }
    shards.push_back(std::move(part));
    return tensor_base;
}

// A Hugging Face sharded checkpoint: {"metadata": {"total_size": N}, "weight_map": {name: shard}}.
// Every shard is opened (a missing one is an error naming it) and its state dict joined into one;
// what the index says is checked against what the shards hold, and disagreements are problems:
// a tensor in another shard than the map says, one the map does not list, one the map lists that no
// shard holds, a name in two shards, a total_size other than the tensors' bytes.
std::unique_ptr<Checkpoint> try_open_hf_index(const std::string& given, const OpenOptions& options) {
    if (!is_sharded_index(given)) return nullptr;
    struct stat ds {};
    std::string path = ::stat(given.c_str(), &ds) == 0 && S_ISDIR(ds.st_mode) ? index_in(given) : given;
    auto c = std::make_unique<Checkpoint::Contents>();
    c->path = path;
    auto j = read_json_file(path);
    auto bad = [&](const std::string& why) { throw Error(ErrorKind::format, path, "not a sharded checkpoint index: " + why); };
    if (!j || !j->is_object() || !j->contains("weight_map") || !(*j)["weight_map"].is_object()) bad("no \"weight_map\" object");
    c->file = std::make_unique<MappedFile>(path);
    std::string dir = text::parent_dir(path);
    // The map's names and shards, in the index's order, each name indexed once (StringIndex: a
    // std::unordered_map<std::string, std::string> of 100,000 names was a tenth of inspect's time).
    std::vector<std::pair<std::string, std::string>> map;  // name → shard
    StringIndex listed;                                    // name → its row of map
    auto map_name = [&](size_t i) -> std::string_view { return map[i].first; };
    std::unordered_set<std::string> shard_set;
    const auto& weight_map = (*j)["weight_map"];
    map.reserve(weight_map.size());
    listed.reserve(weight_map.size());
    for (auto it = weight_map.begin(); it != weight_map.end(); ++it) {
        if (!it.value().is_string()) bad("weight_map[\"" + it.key() + "\"] is not a file name");
        std::string file = it.value().get<std::string>();
        if (file.empty() || file.find('/') != std::string::npos || file == "..")
            bad("weight_map[\"" + it.key() + "\"] names \"" + file + "\", not a file beside the index");
        map.push_back({it.key(), file});
        listed.insert(map.back().first, map.size() - 1, map_name);  // JSON object keys are unique
        if (shard_set.insert(file).second) c->shard_names.push_back(file);
    }
    std::sort(c->shard_names.begin(), c->shard_names.end());  // model-00001-of-… first
    Value* root = c->arena.make(ValueKind::dict, 0);
    // The shard that holds each tensor: by row of map, and for names the map does not list, by name.
    std::vector<const std::string*> holder(map.size(), nullptr);
    std::unordered_map<std::string, std::string> unlisted_holder;
    uint64_t total = 0;
    // A hint, as a rule a storage and a record a tensor: the tables are filled once, not moved
    // element by element as they grow (a tenth of inspect's time on 100,000 tensors).
    c->tensors.reserve(map.size());
    c->storages.reserve(map.size());
    c->records.reserve(map.size());
    for (size_t s = 0; s < c->shard_names.size(); ++s) {
        const std::string& file = c->shard_names[s];
        std::string full = dir + "/" + file;
        if (::access(full.c_str(), F_OK) != 0)
            throw Error(ErrorKind::io, path, "shard " + file + " named by the index does not exist");
        std::unique_ptr<Checkpoint> owned = Checkpoint::open(full, options);
        const Checkpoint* shard = owned.get();
        if (s == 0) c->format = shard->format();
        size_t tensor_base = c->adopt_part(std::move(owned), file);
        // A tensor at a second name of the shard (a tied weight's alias in its __metadata__) counts
        // once in total_size, and the weight_map may list that name or not, as writers differ.
        std::vector<char> seen(shard->tensors().size());
        for (const auto& e : shard->state_dict().entries) {
            const Entry& entry = shard->entries()[e.entry];
            std::string_view name = e.name;
            bool alias = seen[*entry.tensor];
            seen[*entry.tensor] = 1;
            size_t row = listed.find(name, map_name);
            const std::string* held = row != StringIndex::npos ? holder[row] : nullptr;
            if (row == StringIndex::npos)
                if (auto it = unlisted_holder.find(std::string(name)); it != unlisted_holder.end()) held = &it->second;
            if (held) {
                c->problems.push_back({"index_duplicate", std::string(name), "tensor " + std::string(name) + " is in both " + *held + " and " + file});
                continue;
            }
            if (row == StringIndex::npos) {
                unlisted_holder.emplace(std::string(name), file);
                if (!alias)
                    c->problems.push_back({"index_unlisted", std::string(name), "tensor " + std::string(name) + " of " + file + " is not in the index's weight_map"});
            } else {
                holder[row] = &file;
                if (map[row].second != file)
                    c->problems.push_back({"index_wrong_shard", std::string(name), "tensor " + std::string(name) + " is in " + file + ", the index says " + map[row].second});
            }
            Value* key = c->arena.make(ValueKind::string, 0);
            key->set_s(c->arena.own(name));
            Value* tv = c->arena.make(ValueKind::tensor, 0);
            tv->set_i(static_cast<int64_t>(tensor_base + *entry.tensor));
            tv->set_s(c->arena.own(std::string(dtype_name(c->tensors[tensor_base + *entry.tensor].dtype))));
            c->arena.append_entry(root, key, tv);
            if (!alias) total += c->tensor_bytes(c->tensors[tensor_base + *entry.tensor]);
        }
        c->shards.back()->contents().keep_records_only();  // its tables are joined into c's now
    }
    for (size_t row = 0; row < map.size(); ++row)
        if (const auto& [name, file] = map[row]; !holder[row])
            c->problems.push_back({"index_missing_tensor", name, "the index places " + name + " in " + file + ", which does not hold it"});
    if (j->contains("metadata") && (*j)["metadata"].is_object() && (*j)["metadata"].contains("total_size")) {
        const auto& ts = (*j)["metadata"]["total_size"];
        if (!ts.is_number_unsigned() || ts.get<uint64_t>() != total)
            c->problems.push_back({"index_total_size", path, "the index's total_size is " + ts.dump() + ", the tensors hold " +
                                                                   std::to_string(total) + " bytes"});
    }
    c->root = root;
    ModelBuilder(*c, options).build(false);  // the shards checked their storages
    return std::make_unique<Checkpoint>(std::move(c));
}

}  // namespace ckpt
