// torch.distributed.checkpoint in Hugging Face's storage (torch ≥ 2.7's HuggingFaceStorageWriter with
// save_sharded / save_distributed; torchtitan, torchtune, NeMo Automodel): a folder of
//   shard-RRRRR-model-IIIII-of-NNNNN.safetensors   rank R's chunks (R counts from 1), plain safetensors
//                                                  files whose tensors are named by their FQN, one chunk
//                                                  of a tensor per file, and whose __metadata__ holds
//                                                  DCP_SHARDING_INFO: JSON {fqn: {"saved_offsets": [o…]}}
// and no .metadata, no index. Each tensor is its chunks placed at their offsets; the global shape is
// recorded nowhere, so it is what torch's reader takes (the element-wise max of offset + shape over
// the chunks), and the chunks must tile it exactly (dist::tile_chunks) — torch's own consolidation
// checks neither, and crashes on integer and bool tensors.
#include <map>
#include <regex>

#include "base/text_util.hpp"
#include "ckpt/error.hpp"
#include "formats/dist.hpp"
#include "formats/safetensors.hpp"
#include "io/json.hpp"
#include "io/mapped_file.hpp"
#include "model/contents.hpp"

namespace ckpt {

namespace {

const std::regex& shard_name() {
    static const std::regex re(R"(shard-(\d{5,})-model-(\d{5,})-of-(\d{5,})\.safetensors)");
    return re;
}

std::string sharding_info(const SafetensorsHeader& h) {
    for (const auto& [k, v] : h.metadata)
        if (k == "DCP_SHARDING_INFO") return v;
    return "";
}

}  // namespace

bool dcp_hf_folder(const std::string& dir) { return any_name_matches(dir, shard_name()); }

std::unique_ptr<Checkpoint> open_dcp_hf(const std::string& dir, const OpenOptions& options) {
    auto contents = dist_contents(dir, dir, "dcp-hf");
    Checkpoint::Contents* c = contents.get();
    DistInfo& info = *c->dist;
    DistView view(*c, options);
    struct Placed {
        DType dtype;
        std::vector<dist::Chunk> chunks;
        std::vector<std::string> files;
    };
    std::map<std::string, Placed> tensors;
    std::vector<std::string> order;  // first seen
    std::map<int, int> ranks;        // rank → files
    std::string version;
    for (const std::string& n : dist::list_dir(dir)) {
        std::smatch m;
        if (!std::regex_match(n, m, shard_name())) continue;
        ++ranks[std::stoi(m[1])];
        auto file = std::make_shared<MappedFile>(dir + "/" + n);
        const std::string path = file->path();
        SafetensorsHeader h = naming_file(path, [&] { return read_safetensors(file->view()); });
        std::string info_json = sharding_info(h);
        if (info_json.empty()) throw Error(ErrorKind::format, path, "has no DCP_SHARDING_INFO in its __metadata__: not a shard of a DCP save in Hugging Face's storage");
        for (const auto& [k, v] : h.metadata)
            if (k == "DCP_VERSION") version = v;
        nlohmann::json parsed = nlohmann::json::parse(info_json, nullptr, false);
        const nlohmann::json* j = &parsed;
        if (parsed.is_discarded() || !parsed.is_object()) throw Error(ErrorKind::corrupt, path, "its DCP_SHARDING_INFO is not a JSON object");
        for (const SafetensorsTensor& t : h.tensors) {
            auto it = j->find(t.name);
            if (it == j->end() || !it->is_object() || !it->contains("saved_offsets") || !(*it)["saved_offsets"].is_array())
                throw Error(ErrorKind::corrupt, path, t.name + " has no saved_offsets in DCP_SHARDING_INFO: where its chunk lies is unknown");
            std::vector<int64_t> offsets;
            for (const auto& o : (*it)["saved_offsets"]) {
                if (!o.is_number_integer() || o.get<int64_t>() < 0) throw Error(ErrorKind::corrupt, path, t.name + ": saved_offsets holds " + o.dump());
                offsets.push_back(o.get<int64_t>());
            }
            if (offsets.size() != t.shape.size())
                throw Error(ErrorKind::corrupt, path, t.name + ": saved_offsets has " + std::to_string(offsets.size()) + " numbers for a tensor of " +
                                                          std::to_string(t.shape.size()) + " dimensions");
            auto [p, fresh] = tensors.try_emplace(t.name, Placed{t.dtype, {}, {}});
            if (fresh) order.push_back(t.name);
            else if (p->second.dtype != t.dtype)
                throw Error(ErrorKind::corrupt, path, t.name + " is " + std::string(dtype_name(t.dtype)) + " here, " + std::string(dtype_name(p->second.dtype)) + " in " +
                                                          p->second.files.front());
            p->second.chunks.push_back({offsets, std::vector<int64_t>(t.shape.begin(), t.shape.end()), {file.get(), t.begin, t.numel, t.dtype}});
            p->second.files.push_back(n);
        }
        info.files.push_back(n);
        info.bytes += file->size();
        c->piece_files.push_back(file);
    }
    if (ranks.empty()) throw Error(ErrorKind::format, dir, "holds no shard-RRRRR-model-IIIII-of-NNNNN.safetensors");
    for (int r = 1; r <= ranks.rbegin()->first; ++r)
        if (!ranks.count(r)) {
            char b[40];
            std::snprintf(b, sizeof b, "shard-%05d-model-…", r);
            throw Error(ErrorKind::corrupt, dir, "has files of ranks 1–" + std::to_string(ranks.rbegin()->first) + " but none of rank " + std::to_string(r) +
                                                     " (" + b + "): a rank's file is missing");
        }
    Value* sd = view.dict(true);
    for (const std::string& name : order) {
        Placed& p = tensors[name];
        std::vector<int64_t> shape(p.chunks.front().offsets.size(), 0);
        for (const dist::Chunk& ch : p.chunks) {
            if (ch.offsets.size() != shape.size())
                throw Error(ErrorKind::corrupt, dir, name + ": its chunks have different numbers of dimensions");
            for (size_t d = 0; d < shape.size(); ++d) shape[d] = std::max(shape[d], ch.offsets[d] + ch.sizes[d]);
        }
        std::vector<RecordPiece> pieces = dist::tile_chunks(shape, dtype_size(p.dtype), p.chunks, dir, name);
        view.set(sd, name, view.tensor(view.add_tensor(name, p.dtype, shape, std::move(pieces))));
    }
    info.world_size = ranks.rbegin()->first;
    info.writer = "torch.distributed.checkpoint, Hugging Face storage (safetensors shards" + (version.empty() ? std::string(")") : ", DCP_VERSION " + version + ")");
    info.notes.push_back("the tensors' global shapes are not recorded in these files: each is taken from its chunks (as torch's reader does), "
                         "so a rank's file missing at the end of a dimension cannot be told from a smaller tensor; every other gap is an error");
    Value* root = view.dict();
    view.set(root, "model", sd);
    view.finish(root, "model");
    return std::make_unique<Checkpoint>(std::move(contents));
}

}  // namespace ckpt
