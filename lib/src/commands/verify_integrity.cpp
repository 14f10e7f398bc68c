// verify's integrity findings: the CRC of every record named by the tensors it holds, the records'
// frames, problems and records no storage names, NaN/Inf (where the first is), unsafe globals, a
// merged folder's archives and ZeRO masters, and the optimizer's fit. verify.cpp runs them.
#include "commands/verify_detail.hpp"

#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "base/text_util.hpp"
#include "ckpt/error.hpp"
#include "io/mapped_file.hpp"
#include "io/zip.hpp"
#include "formats/dist.hpp"
#include "formats/gather.hpp"
#include "io/json.hpp"
#include "io/sha256.hpp"
#include "model/optimizer.hpp"

namespace ckpt {

using text::ends_with;
using text::hex32;

namespace detail {

namespace {

// The CRC findings, named by the tensors whose bytes each record holds: the records no tensor views
// first (the pickle …), then in the order of the file's tensors (not the directory's, which sorts
// data/10 before data/2). Two or more storages changed is what two saves into one file leave, and
// a finding of its own says so, first.
void crc_findings(const Checkpoint& c, const Fingerprint& fp, std::vector<Finding>& out) {
    constexpr size_t k_none = SIZE_MAX;
    std::vector<size_t> bad_of_record(c.records().size(), k_none);  // record → its row in fp.records
    std::vector<const RecordCrc*> bad;
    for (const RecordCrc& r : fp.records)
        if (!r.ok())
            if (auto i = c.record_index(r.record)) {
                bad_of_record[*i] = bad.size();
                bad.push_back(&r);
            }
    if (bad.empty()) return;
    std::vector<std::vector<std::string_view>> keys(bad.size());  // the tensors viewing each, in file order
    std::vector<size_t> order;                                     // bad rows with tensors, by the first one's place
    size_t storage_records = 0;
    std::vector<char> counted(c.records().size());
    for (const Entry& e : c.entries()) {
        if (!e.tensor || !c.tensors()[*e.tensor].strided_view()) continue;
        auto r = c.storage_record(c.tensors()[*e.tensor].storage);
        if (!r) continue;
        if (!counted[*r]) {
            counted[*r] = 1;
            ++storage_records;
        }
        size_t b = bad_of_record[*r];
        if (b == k_none) continue;
        if (keys[b].empty()) order.push_back(b);
        if (keys[b].size() < 4) keys[b].push_back(e.key);
    }
    auto finding = [&](size_t b) {
        const RecordCrc& r = *bad[b];
        std::string what = "record " + std::string(r.record);
        if (!keys[b].empty()) {
            std::string names;
            for (size_t k = 0; k < keys[b].size() && k < 3; ++k) names += (k ? ", " : "") + std::string(keys[b][k]);
            what = names + (keys[b].size() > 3 ? " …" : "") + " (" + what + ")";
        }
        out.push_back({"crc_mismatch", std::string(r.record),
                       what + ": the bytes changed after they were written: CRC-32 is " + hex32(r.actual) +
                           ", the zip directory says " + hex32(r.expected)});
    };
    if (order.size() >= 2) {
        std::string first;
        for (size_t k = 0; k < order.size() && k < 3; ++k) first += (k ? ", " : "") + std::string(keys[order[k]].front());
        out.push_back({"mixed_saves", "",
                       std::to_string(order.size()) + " of " + std::to_string(storage_records) +
                           " tensor records changed after they were written (" + first + (order.size() > 3 ? " …" : "") +
                           "): what two saves into one file leave (" + k_two_writers_advice + ")"});
    }
    for (size_t b = 0; b < bad.size(); ++b)
        if (keys[b].empty()) finding(b);
    for (size_t b : order) finding(b);
}

// Where a tensor's first NaN (or ±Inf) is, as torch indexes it ("[2, 5]"): its logical elements in
// row-major order, each piece asked whether it holds one (buffer_stats), then bisected. "" for a
// 0-dim tensor, or one that is not a plain view of a storage.
std::string first_non_finite_at(const Checkpoint& c, const TensorInfo& view, bool nan) {
    auto record = c.storage_record(view.storage);
    if (!view.strided_view() || view.quantized() || view.shape.empty() || !record) return "";
    // An expanded view: its first one is where the unrepeated tensor's is, at index 0 of each
    // repeating dimension (work bounded by what is stored, not by the expansion).
    bool repeated = !view_within_bounds(view);
    const TensorInfo t = repeated ? view.unrepeated() : view;
    if (!view_within_bounds(t)) return "";
    RecordData data = c.record_data(*record);
    uint64_t size = dtype_size(t.dtype), done = 0;
    std::optional<uint64_t> found;
    for_each_logical_bytes(t, data.view(), [&](const uint8_t* p, size_t n) {
        if (found) return;
        auto holds = [&](uint64_t from, uint64_t count) {
            TensorStats s = buffer_stats(t.dtype, {p + from * size, count * size}, count);
            return nan ? s.nan > 0 : s.inf > 0;
        };
        uint64_t lo = 0, count = n / size;
        if (!holds(0, count)) {
            done += count;
            return;
        }
        while (count > 1)
            if (uint64_t half = count / 2; holds(lo, half)) count = half;
            else lo += half, count -= half;
        found = done + lo;
    });
    if (!found) return "";
    std::vector<uint64_t> index(t.shape.size());
    for (size_t d = t.shape.size(), rest = *found; d-- > 0; rest /= static_cast<uint64_t>(t.shape[d]))
        index[d] = rest % static_cast<uint64_t>(t.shape[d]);
    if (repeated) {
        std::vector<uint64_t> full;
        for (size_t d = 0, k = 0; d < view.shape.size(); ++d)
            full.push_back(view.stride[d] == 0 && view.shape[d] > 1 ? 0 : index[k++]);
        index = std::move(full);
    }
    std::string out = "[";
    for (size_t d = 0; d < index.size(); ++d) out += (d ? ", " : "") + std::to_string(index[d]);
    return out + "]";
}

}  // namespace

// A tensor's NaN and Inf findings.
void value_findings(const TensorPrint& t, std::vector<Finding>& out) {
    if (t.stats.nan)
        out.push_back({"nan", t.key, t.key + " holds " + std::to_string(t.stats.nan) + " NaN of " +
                                         std::to_string(t.stats.count) + " values"});
    if (t.stats.inf)
        out.push_back({"inf", t.key, t.key + " holds " + std::to_string(t.stats.inf) + " Inf of " +
                                         std::to_string(t.stats.count) + " values"});
}

// Each NaN and Inf finding says where the first one is: the tensors are read again, only those.
void locate_non_finite(const Checkpoint& c, bool all, std::vector<Finding>& values) {
    if (values.empty()) return;
    std::unordered_map<std::string_view, size_t> tensor_of;  // the key a print has → its tensor
    if (all)
        for (const Entry& e : c.entries()) {
            if (e.tensor) tensor_of.emplace(e.key, *e.tensor);
        }
    else
        for (const auto& e : c.state_dict().entries)
            if (auto t = c.entries()[e.entry].tensor) tensor_of.emplace(e.name, *t);
    for (Finding& f : values)
        if (auto it = tensor_of.find(f.key); it != tensor_of.end())
            if (std::string at = first_non_finite_at(c, c.tensors()[it->second], f.kind == "nan"); !at.empty())
                f.message += ", the first at " + at;
}

// `values`: the tensors' NaN and Inf findings, in file order (value_findings of each).
void integrity_findings(const Checkpoint& c, const Fingerprint& fp, std::vector<Finding>&& values,
                        const GlobalPolicy& policy, std::vector<Finding>& out) {
    crc_findings(c, fp, out);
    for (const auto& p : c.problems()) out.push_back({p.kind, p.key, p.message});
    for (size_t i : c.unreferenced_records()) {
        std::string name(c.records()[i].name);
        out.push_back({"unreferenced_record", name, "record " + name + " is not the storage of any tensor (left by another writer?)"});
    }
    out.insert(out.end(), std::make_move_iterator(values.begin()), std::make_move_iterator(values.end()));
    for (const auto& g : c.globals()) {
        GlobalVerdict v = judge(policy, g);
        if (v.cls == GlobalClass::dangerous)
            out.push_back({"unsafe_global", g.full_name(),
                           g.full_name() + " is dangerous: unpickling the file would call it (torch.load runs it): " + v.reason});
        else if (v.cls == GlobalClass::unknown)
            out.push_back({"unsafe_global", g.full_name(),
                           g.full_name() + " is not on the allow-list (a custom class: torch.load(weights_only=True) "
                                           "refuses the file, a plain torch.load imports and runs it; --allow it if you trust it)"});
    }
}

// Copies that must be equal (a norm replicated over tensor-parallel ranks, a tied copy): each
// against the first, element by element.
void replica_findings(const DistInfo& d, std::vector<Finding>& out, uint64_t& bytes) {
    for (const DistInfo::Replica& rep : d.replicas) {
        if (rep.copies.size() < 2) continue;
        auto read = [&](const std::vector<RecordPiece>& pieces) {
            RecordInfo r;
            r.name = rep.name;
            r.size = rep.size;
            r.pieces = pieces;
            return ckpt::detail::gather(r);
        };
        RecordData first = read(rep.copies[0]);
        bytes += rep.size;
        uint64_t esz = rep.dtype == DType::untyped ? 1 : dtype_size(rep.dtype);
        for (size_t k = 1; k < rep.copies.size(); ++k) {
            RecordData other = read(rep.copies[k]);
            bytes += rep.size;
            const uint8_t* a = first.view().data;
            const uint8_t* b = other.view().data;
            uint64_t differ = 0, n = rep.size / esz;
            double worst = 0;
            for (uint64_t i = 0; i < n; ++i) {
                if (std::memcmp(a + i * esz, b + i * esz, esz) == 0) continue;
                ++differ;
                if (rep.dtype == DType::float32) {
                    float x, y;
                    std::memcpy(&x, a + i * esz, 4);
                    std::memcpy(&y, b + i * esz, 4);
                    worst = std::max(worst, std::fabs(static_cast<double>(x) - y));
                }
            }
            if (differ)
                out.push_back({"replica_drift", rep.name,
                               rep.name + ": " + std::to_string(differ) + " of " + std::to_string(n) + " elements differ between " + rep.where[0] + " and " +
                                   rep.where[k] + (worst > 0 ? " (largest difference " + repr_float(worst) + ")" : std::string()) +
                                   ": copies that must be equal drifted apart (sequence parallelism without its all-reduce, or files of two runs)"});
        }
    }
}

// Megatron's integrity.json (torch_dist, 2026-04 on): {"algorithm": "sha256", "files": {name: hex}}
// over every regular file of the folder but itself. Each listed file hashed again; one missing,
// changed or not listed is a finding.
void integrity_findings(const DistInfo& d, std::vector<Finding>& out, uint64_t& bytes) {
    const std::string path = d.dir + "/integrity.json";
    if (d.layout != "megatron-torch_dist" || !dist::is_file(path)) return;
    std::optional<nlohmann::json> j = read_json_file(path);
    const nlohmann::json* files = j && j->is_object() && j->contains("files") ? &(*j)["files"] : nullptr;
    if (!files || !files->is_object() || json_string_or(*j, "algorithm") != "sha256") {
        out.push_back({"integrity_mismatch", "integrity.json", "integrity.json is not {\"algorithm\": \"sha256\", \"files\": {name: digest}}: nothing checked"});
        return;
    }
    std::unordered_set<std::string> listed;
    for (const auto& [name, digest] : files->items()) {
        listed.insert(name);
        if (name.empty() || name.find('/') != std::string::npos || name == "." || name == ".." || !digest.is_string()) {
            out.push_back({"integrity_mismatch", name, "integrity.json lists \"" + name + "\", not a file of the folder with a digest"});
            continue;
        }
        if (!dist::is_file(d.dir + "/" + name)) {
            out.push_back({"integrity_mismatch", name, name + " is listed by integrity.json and missing"});
            continue;
        }
        std::string got = sha256_file(d.dir + "/" + name, bytes);
        if (got != digest.get<std::string>())
            out.push_back({"integrity_mismatch", name, name + ": SHA-256 is " + got + ", integrity.json says " + digest.get<std::string>() + " (changed since the save)"});
    }
    for (const std::string& n : dist::list_dir(d.dir))
        if (n != "integrity.json" && dist::is_file(d.dir + "/" + n) && !listed.count(n))
            out.push_back({"integrity_mismatch", n, n + " is in the folder and not in integrity.json (added after the save?)"});
}

// A merged view (a DeepSpeed or DCP folder): every archive it was read from, each record's CRC-32
// against its zip directory; and for ZeRO-1/2 the module's weights against the fp32 masters cast
// down as the optimizer casts them (round to nearest even), which a checkpoint whose optimizer
// and module states come from different steps or runs fails.
void dist_findings(const Checkpoint& c, std::vector<Finding>& out, size_t& records, uint64_t& bytes) {
    const DistInfo& d = *c.dist();
    std::unordered_map<std::string, std::shared_ptr<MappedFile>> open;
    for (const DistInfo::Archive& a : d.archives) {
        auto& f = open[a.file];
        if (!f) f = std::make_shared<MappedFile>(a.file.empty() ? d.dir : d.dir + "/" + a.file);
        auto view = f->view().sub(a.offset, a.length);
        std::string where = !a.member.empty() ? a.member : a.offset || a.length != f->size() ? a.file + "@" + std::to_string(a.offset) : a.file;
        if (!view) throw Error(ErrorKind::corrupt, f->path(), "is shorter than the archive at byte " + std::to_string(a.offset) + " needs: truncated?");
        ZipArchive zip = ZipArchive::open(*view);
        for (const ZipEntry& e : zip.entries()) {
            if (e.crc32 == 0 && e.size) continue;  // written without a CRC-32 (torch 2.x): nothing to check
            uint32_t got = zip.compute_crc32(e);
            ++records;
            bytes += e.size;
            if (got != e.crc32)
                out.push_back({"crc_mismatch", where + ":" + std::string(e.name),
                               where + ": record " + std::string(e.name) + ": CRC-32 is " + hex32(got) + ", the zip directory says " + hex32(e.crc32) +
                                   " (the bytes changed after they were written)"});
        }
        f->release(*view);
    }
    replica_findings(d, out, bytes);
    integrity_findings(d, out, bytes);
    if (d.module_states.empty() || d.masters.empty()) return;
    std::unique_ptr<Checkpoint> m = Checkpoint::open(d.dir + "/" + d.module_states);
    std::unordered_map<std::string, size_t> module_tensor, merged_tensor;
    for (const auto& e : m->state_dict().entries) module_tensor.emplace(e.name, *m->entries()[e.entry].tensor);
    for (const auto& e : c.state_dict().entries) merged_tensor.emplace(e.name, *c.entries()[e.entry].tensor);
    for (const std::string& name : d.masters) {
        auto mi = module_tensor.find(name);
        auto ci = merged_tensor.find(name);
        if (ci == merged_tensor.end()) continue;
        if (mi == module_tensor.end()) {
            out.push_back({"master_mismatch", name, name + " has fp32 masters but no weight in " + d.module_states});
            continue;
        }
        const TensorInfo& mt = m->tensors()[mi->second];
        const TensorInfo& ct = c.tensors()[ci->second];
        if (mt.shape != ct.shape) {
            out.push_back({"master_mismatch", name, name + " is " + shape_text(mt.shape) + " in " + d.module_states + ", " + shape_text(ct.shape) + " in the fp32 masters"});
            continue;
        }
        if (ct.dtype != DType::float32 || (mt.dtype != DType::float16 && mt.dtype != DType::bfloat16 && mt.dtype != DType::float32) ||
            !mt.contiguous() || !ct.contiguous())
            continue;
        RecordData master = c.record_data(*c.storage_record(ct.storage));
        RecordData weight = m->record_data(*m->storage_record(mt.storage));
        const uint8_t* w = weight.view().data + static_cast<uint64_t>(mt.storage_offset) * dtype_size(mt.dtype);
        const float* f = reinterpret_cast<const float*>(master.view().data + static_cast<uint64_t>(ct.storage_offset) * 4);
        uint64_t differ = 0;
        for (uint64_t i = 0; i < ct.numel; ++i) {
            if (mt.dtype == DType::float32) {
                differ += std::memcmp(w + 4 * i, f + i, 4) != 0;
                continue;
            }
            float x;
            std::memcpy(&x, f + i, 4);
            uint16_t want = mt.dtype == DType::float16 ? float_to_half_bits(x) : float_to_bf16_bits(x), have;
            std::memcpy(&have, w + 2 * i, 2);
            differ += want != have && !(std::isnan(x) && ((have & 0x7fff) > (mt.dtype == DType::float16 ? 0x7c00 : 0x7f80)));
        }
        bytes += ct.nbytes() + mt.nbytes();
        if (differ)
            out.push_back({"master_mismatch", name,
                           name + ": " + std::to_string(differ) + " of " + std::to_string(ct.numel) + " elements of the " +
                               std::string(dtype_name(mt.dtype)) + " weight in " + d.module_states +
                               " are not the fp32 master cast down (module and optimizer states of different steps?)"});
    }
}

}  // namespace detail

std::vector<Finding> check_optimizers(const Checkpoint& c) {
    std::vector<Finding> out;
    const StateDict& sd = c.state_dict();
    std::vector<std::pair<std::string, const TensorInfo*>> params;
    for (const auto& e : sd.entries) {
        const Entry& entry = c.entries()[e.entry];
        const TensorInfo& t = c.tensors()[*entry.tensor];
        if (!dtype_is_floating(t.dtype) || ends_with(e.name, "running_mean") || ends_with(e.name, "running_var"))
            continue;
        params.push_back({std::string(e.name), &t});
    }
    // The shape a parameter's state says it has (its first state tensor that is not a scalar).
    auto state_shape = [&](const Value* fields) -> const Dims* {
        if (!fields || fields->kind != ValueKind::dict) return nullptr;
        for (size_t k = 0; k < fields->dict_size(); ++k) {
            const Value* v = fields->dict_value(k);
            if (v->kind != ValueKind::tensor) continue;
            const TensorInfo& t = c.tensors()[static_cast<size_t>(v->i())];
            if (!t.shape.empty() && t.numel > 1) return &t.shape;  // step counters and other scalars are not
        }
        return nullptr;
    };
    for (const OptimizerRef& o : find_optimizers(c.root())) {
        // The "state dict" found inside the optimizer itself (a file that holds only an optimizer)
        // is no model to fit it to.
        if (o.key.empty() || sd.path == o.key || text::starts_with(sd.path, o.key + ".")) continue;
        std::vector<std::vector<int64_t>> groups;  // each group's parameter ids, in its order
        size_t count = 0;
        for (const Value* g : o.param_groups()->items()) {
            const Value* p = g->kind == ValueKind::dict ? g->get("params") : nullptr;
            if (!p) continue;
            groups.emplace_back();
            for (const Value* id : p->items())
                if (id->kind == ValueKind::integer) groups.back().push_back(id->i()), ++count;
        }
        std::string where = "optimizer '" + o.key + "'";
        const Value* state = o.state();
        if (!count) {
            // Keyed by parameter name (torch.distributed.checkpoint's, FSDP's optim_state_dict):
            // each state whose name the state dict has must have that parameter's shape.
            std::unordered_map<std::string, const TensorInfo*> by_name(params.begin(), params.end());
            for (size_t i = 0; i < state->dict_size(); ++i) {
                if (state->dict_key(i)->kind != ValueKind::string) continue;
                auto p = by_name.find(std::string(state->dict_key(i)->s()));
                const Dims* shape = state_shape(state->dict_value(i));
                if (p != by_name.end() && shape && *shape != p->second->shape)
                    out.push_back({"optimizer_mismatch", o.key,
                                   where + ": the state of " + p->first + " is " + shape_text(*shape) + ", the parameter is " +
                                       shape_text(p->second->shape)});
            }
            continue;
        }
        if (count > params.size()) {
            out.push_back({"optimizer_mismatch", o.key,
                           where + " has " + std::to_string(count) + " parameters, the state dict " +
                               std::to_string(params.size()) + ": it belongs to another model"});
            continue;
        }
        std::unordered_map<int64_t, const Value*> state_of;
        std::unordered_set<int64_t> listed_ids;  // a set: MoE optimizers list 100,000s of ids
        for (const auto& g : groups) listed_ids.insert(g.begin(), g.end());
        for (size_t i = 0; i < state->dict_size(); ++i) {
            const Value* id = state->dict_key(i);
            bool listed = id->kind == ValueKind::integer && listed_ids.count(id->i());
            if (!listed) {
                out.push_back({"optimizer_mismatch", o.key, where + " holds state for parameter " + repr(id) + ", which no param group lists"});
                continue;
            }
            state_of.emplace(id->i(), state->dict_value(i));
        }
        if (groups.size() == 1 && count == params.size()) {
            // One group over all of them: torch numbers the parameters in model order.
            for (size_t i = 0; i < groups[0].size(); ++i) {
                auto st = state_of.find(groups[0][i]);
                const Dims* shape = st == state_of.end() ? nullptr : state_shape(st->second);
                if (shape && *shape != params[i].second->shape) {
                    out.push_back({"optimizer_mismatch", o.key,
                                   where + ": the state of parameter " + std::to_string(groups[0][i]) + " is " + shape_text(*shape) +
                                       ", but parameter " + std::to_string(i) + " of the state dict (" + params[i].first + ") is " +
                                       shape_text(params[i].second->shape)});
                    break;
                }
            }
            continue;
        }
        // Several groups (weight decay and none, the split of Hugging Face's trainers) or frozen
        // parameters left out: each group lists its parameters in model order, a subsequence of the
        // state dict's, which the earliest match finds when there is one.
        for (size_t g = 0; g < groups.size(); ++g) {
            size_t at = 0;
            for (int64_t id : groups[g]) {
                auto st = state_of.find(id);
                const Dims* shape = st == state_of.end() ? nullptr : state_shape(st->second);
                while (at < params.size() && shape && *shape != params[at].second->shape) ++at;
                if (at == params.size()) {
                    out.push_back({"optimizer_mismatch", o.key,
                                   where + ": param group " + std::to_string(g) + " has state for parameter " + std::to_string(id) + " of " +
                                       shape_text(*shape) + ", which no parameter of the state dict after those before it has"});
                    break;
                }
                ++at;
            }
        }
    }
    return out;
}

}  // namespace ckpt
