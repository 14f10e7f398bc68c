#include "ckpt/verify.hpp"

#include "base/text_util.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <ostream>
#include <unordered_map>
#include <unordered_set>
#include <system_error>
#include <utility>

#include "ckpt/error.hpp"
#include "model/keys.hpp"
#include "io/mapped_file.hpp"
#include "model/optimizer.hpp"
#include "ckpt/report.hpp"
#include "stats/prints_by_key.hpp"
#include "stats/torch_backend.hpp"
#include "io/zip.hpp"

namespace ckpt {

namespace {

using text::ends_with;
using text::hex32;

std::string number_text(const Stat& v) {
    if (!v) return "none";
    return repr_float(*v);
}

// A statistic and its reference for people: 4 significant digits, more only where the two would
// read the same (a drift past rtol 1e-6 needs 7); "none" for a missing one.
std::pair<std::string, std::string> number_pair(const Stat& r, const Stat& a) {
    if (!r || !a) return {number_text(r), number_text(a)};
    auto text = [](double v, int digits) {
        char b[40];
        std::snprintf(b, sizeof b, "%.*g", digits, v);
        return std::string(b);
    };
    for (int digits = 4; digits < 17; ++digits)
        if (std::string x = text(*r, digits), y = text(*a, digits); x != y) return {x, y};
    return {repr_float(*r), repr_float(*a)};
}

// A tensor's NaN and Inf findings.
void value_findings(const TensorPrint& t, std::vector<Finding>& out) {
    if (t.stats.nan)
        out.push_back({"nan", t.key, t.key + " holds " + std::to_string(t.stats.nan) + " NaN of " +
                                         std::to_string(t.stats.count) + " values"});
    if (t.stats.inf)
        out.push_back({"inf", t.key, t.key + " holds " + std::to_string(t.stats.inf) + " Inf of " +
                                         std::to_string(t.stats.count) + " values"});
}

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
std::string first_non_finite_at(const Checkpoint& c, const TensorInfo& t, bool nan) {
    auto record = c.storage_record(t.storage);
    if (!t.strided_view() || t.quantized() || t.shape.empty() || !record) return "";
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
    std::string out = "[";
    for (size_t d = 0; d < index.size(); ++d) out += (d ? ", " : "") + std::to_string(index[d]);
    return out + "]";
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

// A merged view (a DeepSpeed or DCP folder): every archive it was read from, each record's CRC-32
// against its zip directory; and for ZeRO-1/2 the module's weights against the fp32 masters cast
// down as the optimizer casts them (round to nearest even), which a checkpoint whose optimizer
// and module states come from different steps or runs fails.
void dist_findings(const Checkpoint& c, std::vector<Finding>& out, size_t& records, uint64_t& bytes) {
    const DistInfo& d = *c.dist();
    std::unordered_map<std::string, std::shared_ptr<MappedFile>> open;
    for (const DistInfo::Archive& a : d.archives) {
        auto& f = open[a.file];
        if (!f) f = std::make_shared<MappedFile>(d.dir + "/" + a.file);
        auto view = f->view().sub(a.offset, a.length);
        std::string where = a.offset || a.length != f->size() ? a.file + "@" + std::to_string(a.offset) : a.file;
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

// One statistic against its reference: within tolerance (atol + rtol·scale, the scale |r| unless
// given), and how far it moved (relative to |r|).
bool within(const Stat& a, const Stat& r, double rtol, double atol, double& relative, double scale = -1) {
    relative = 0;
    if (!a && !r) return true;
    if (!a || !r) {
        relative = INFINITY;
        return false;
    }
    if (std::isnan(*a) || std::isnan(*r) || std::isinf(*a) || std::isinf(*r)) {
        bool same = (std::isnan(*a) && std::isnan(*r)) || *a == *r;
        relative = same ? 0 : INFINITY;
        return same;
    }
    double diff = std::fabs(*a - *r);
    relative = *r == 0 ? (diff == 0 ? 0 : INFINITY) : diff / std::fabs(*r);
    return diff <= atol + rtol * std::max(std::fabs(*r), scale);
}

std::string shape_or_dtype_change(const TensorPrint& a, const TensorPrint& r) {
    std::string m;
    if (a.dtype != r.dtype) m = "dtype " + r.dtype + " → " + a.dtype;
    if (a.shape != r.shape) m += (m.empty() ? "" : ", ") + std::string("shape ") + shape_text(r.shape) + " → " + shape_text(a.shape);
    return m;
}

void compare(VerifyReport& rep, const Fingerprint& ref) {
    const VerifyOptions& o = rep.options;
    // The reference's prints by key (it is not changed here) and a flag for each reference tensor
    // matched.
    PrintsByKey by_key(ref.tensors);
    std::vector<char> matched(ref.tensors.size());
    std::vector<Finding> drift;
    std::map<std::string, std::pair<size_t, std::string>> recast_by_kind;  // "float32 → bfloat16" → count, first key
    size_t bytes_differ = 0;
    std::string first_bytes_differ;
    for (auto& v : rep.tensors) {
        const TensorPrint& a = v.print;
        size_t at = by_key.find(a.key);
        if (at == PrintsByKey::npos) {
            v.status = "extra";
            rep.findings.push_back({"extra", a.key, a.key + " is not in the reference"});
            continue;
        }
        matched[at] = 1;
        const TensorPrint& r = ref.tensors[at];
        v.reference = std::make_shared<const TensorStats>(r.stats);
        // A new dtype alone (orig.bf16.pth against orig.pth) is compared after the cast, within the
        // tolerance, and said once (a note); with --exact, or a new shape, it is a change.
        bool recast = a.dtype != r.dtype && a.shape == r.shape && !o.exact;
        std::string change = recast ? "" : shape_or_dtype_change(a, r);
        if (!change.empty()) {
            v.status = "changed";
            rep.findings.push_back({"changed", a.key, a.key + ": " + change});
            continue;
        }
        if (recast) {
            auto& [count, first] = recast_by_kind[r.dtype + " → " + a.dtype];
            if (!count++) first = a.key;
        }
        if (!a.readable || !r.readable) {
            v.status = "changed";
            rep.findings.push_back({"changed", a.key, a.key + ": its bytes cannot be read on " +
                                                          std::string(!a.readable ? "this" : "the reference's") + " side"});
            continue;
        }
        if (o.exact) {
            v.status = a.stats.hash == r.stats.hash ? "ok" : "changed";
            if (v.status == "changed")
                rep.findings.push_back({"changed", a.key, a.key + ": content differs (" + a.stats.hash.text() + " vs " + r.stats.hash.text() + ")"});
            continue;
        }
        const char* names[] = {"mean", "std", "min", "max", "abs_mean", "l2"};
        const Stat* av[] = {&a.stats.mean, &a.stats.std, &a.stats.min, &a.stats.max, &a.stats.abs_mean, &a.stats.l2};
        const Stat* rv[] = {&r.stats.mean, &r.stats.std, &r.stats.min, &r.stats.max, &r.stats.abs_mean, &r.stats.l2};
        bool ok = true;
        std::string message;
        // After a cast every element moves by its own rounding: the mean, a sum whose terms may cancel,
        // moves by a fraction of the mean of their magnitudes (abs_mean), not of its own.
        double mean_scale = recast && r.stats.abs_mean ? *r.stats.abs_mean : -1;
        for (size_t i = 0; i < 6; ++i) {
            double rel = 0;
            if (!within(*av[i], *rv[i], o.rtol, o.atol, rel, i == 0 ? mean_scale : -1)) {
                if (ok || rel > v.relative_change) {
                    v.relative_change = rel;
                    v.worst_stat = names[i];
                    char pct[32];
                    std::snprintf(pct, sizeof pct, "%+.3g%%", std::isinf(rel) ? rel : 100.0 * rel * ((**av[i] < **rv[i]) ? -1 : 1));
                    auto [was, now] = number_pair(*rv[i], *av[i]);
                    message = a.key + ": " + names[i] + " " + was + " → " + now +
                              (av[i]->has_value() && rv[i]->has_value() && !std::isinf(rel) ? std::string(" (") + pct + ")" : "") +
                              (recast ? " (dtype " + r.dtype + " → " + a.dtype + ")" : "");
                }
                ok = false;
            }
        }
        if (a.stats.nan != r.stats.nan || a.stats.inf != r.stats.inf) {
            if (ok) {
                v.worst_stat = a.stats.nan != r.stats.nan ? "nan" : "inf";
                v.relative_change = INFINITY;
                message = a.key + ": NaN/Inf count " + std::to_string(r.stats.nan + r.stats.inf) + " → " +
                          std::to_string(a.stats.nan + a.stats.inf);
            }
            ok = false;
        }
        v.status = ok ? "ok" : "drift";
        if (!ok) drift.push_back({"drift", a.key, message, v.relative_change});
        if (ok && !recast && a.stats.hash != r.stats.hash && !a.stats.hash.empty() && !r.stats.hash.empty())
            if (!bytes_differ++) first_bytes_differ = a.key;
    }
    for (const auto& [kinds, what] : recast_by_kind)
        rep.notes.push_back(std::to_string(what.first) + (what.first == 1 ? " tensor" : " tensors") + " changed dtype, " + kinds +
                            " (" + what.second + (what.first == 1 ? "" : " …") + "): compared after the cast, within the tolerance");
    if (bytes_differ)
        rep.notes.push_back(std::to_string(bytes_differ) + (bytes_differ == 1 ? " tensor is" : " tensors are") +
                            " within the tolerance but its bytes differ (" + first_bytes_differ + (bytes_differ == 1 ? "" : " …") +
                            "): statistics do not see a transposed or permuted weight; --exact compares the content");
    std::stable_sort(drift.begin(), drift.end(),
                     [](const Finding& x, const Finding& y) { return x.relative_change > y.relative_change; });
    rep.findings.insert(rep.findings.end(), drift.begin(), drift.end());
    size_t missing = 0;  // room for them first: the verdicts are not moved to a table twice their size
    for (const TensorPrint& r : ref.tensors) missing += !matched[by_key.find(r.key)];
    rep.tensors.reserve(rep.tensors.size() + missing);
    for (size_t i = 0; i < ref.tensors.size(); ++i) {
        const TensorPrint& r = ref.tensors[i];
        if (matched[by_key.find(r.key)]) continue;  // a key twice in the reference: both by its first
        TensorVerdict v;
        v.print.key = r.key;
        v.print.dtype = r.dtype;
        v.print.shape = r.shape;
        v.print.readable = false;
        v.reference = std::make_shared<const TensorStats>(r.stats);
        v.status = "missing";
        rep.tensors.push_back(std::move(v));
        rep.findings.push_back({"missing", r.key, r.key + " is in the reference, not in this file"});
    }
}

Fingerprint reference_fingerprint(const VerifyOptions& o, bool& is_fingerprint_file, ReferenceAhead* ahead) {
    const std::string& path = *o.reference;
    std::optional<Fingerprint> from_file = ahead               ? ahead->take()
                                           : is_sharded_index(path) ? std::nullopt
                                                                    : read_fingerprint_file(path);
    is_fingerprint_file = from_file.has_value();
    if (from_file) return std::move(*from_file);
    std::unique_ptr<Checkpoint> r = Checkpoint::open(path, o.reference_open);
    if (r->format() == Format::torchscript) return torchscript_fingerprint(path);  // torch::jit::load is the authority
    if (!r->problems().empty())
        throw Error(ErrorKind::corrupt, path, "the reference is damaged: " + r->problems().front().message + " (verify it on its own)");
    FingerprintOptions so;
    so.all = o.all;
    so.key_globs = o.key_globs;
    so.ignore_globs = o.ignore_globs;
    so.threads = o.threads;
    return fingerprint(*r, so);
}

}  // namespace

ReferenceAhead::ReferenceAhead(const VerifyOptions& o) {
    if (!o.reference || is_sharded_index(*o.reference)) return;
    m_path = *o.reference;
    m_read = true;
    try {
        m_thread = std::thread([this] {
            try {
                m_result = read_fingerprint_file(m_path);
            } catch (...) {
                m_error = std::current_exception();
            }
        });
    } catch (const std::system_error&) {
        // No thread to be had: take() reads it.
    }
}

ReferenceAhead::~ReferenceAhead() {
    if (m_thread.joinable()) m_thread.join();
}

std::optional<Fingerprint> ReferenceAhead::take() {
    if (m_thread.joinable()) m_thread.join();
    else if (m_read) m_result = read_fingerprint_file(m_path);
    m_read = false;
    if (m_error) std::rethrow_exception(std::exchange(m_error, nullptr));
    return std::exchange(m_result, std::nullopt);
}

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

static VerifyReport verify_unnamed(const Checkpoint& c, const VerifyOptions& o, Fingerprint* fingerprint_out, ReferenceAhead* ahead) {
    VerifyReport rep;
    rep.file = c.path();
    rep.reference = o.reference;
    rep.options = o;
    rep.options.progress = nullptr;

    // The reference first: an unreadable one is an error before any work on the file.
    std::optional<Fingerprint> ref;
    bool ref_is_fingerprint = false;
    if (o.reference) ref = reference_fingerprint(o, ref_is_fingerprint, ahead);
    bool all = o.all || (ref && ref_is_fingerprint && ref->scope == "all");

    FingerprintOptions so;
    so.all = all;
    so.key_globs = o.key_globs;
    so.ignore_globs = o.ignore_globs;
    so.check_crc = true;
    so.threads = o.threads;
    so.progress = o.progress;
    bool rows = o.rows || ref;
    if (rows) rep.tensors.reserve(all ? c.tensors().size() : c.state_dict().entries.size());
    std::vector<Finding> values;  // NaN and Inf, in file order
    auto take = [&](const TensorPrint& t) {
        value_findings(t, values);
        ++rep.tensors_read;
    };
    if (!fingerprint_out)  // nobody wants the fingerprint itself: its prints go into the verdicts, if kept
        so.take = [&](TensorPrint&& t) {
            take(t);
            if (rows) rep.tensors.push_back({std::move(t), nullptr, "", "", 0});
        };
    Fingerprint fp;
    try {
        fp = fingerprint(c, so);
    } catch (const Error&) {
        // A record whose local header is broken cannot be found (the workers check each one): when
        // the records' frames say so, they are the findings, with the checks that read no value, and
        // no value is read. The frames are asked only then: a file read whole needs no second pass.
        std::vector<Problem> frames = c.frame_problems();
        if (std::none_of(frames.begin(), frames.end(), [](const Problem& p) { return p.kind == "record_header"; })) throw;
        rep.tensors.clear();
        rep.tensors_read = 0;
        if (frames.size() >= 2)
            rep.findings.push_back({"mixed_saves", "",
                                    std::to_string(frames.size()) + " records are not where or what the zip directory says (" +
                                        frames.front().key + " …): what two saves into one file leave (" + k_two_writers_advice +
                                        "); no tensor value was read"});
        for (const Problem& p : frames) rep.findings.push_back({"record_frame", p.key, p.message});
        integrity_findings(c, Fingerprint{}, {}, *o.policy, rep.findings);
        return rep;
    }
    if (fingerprint_out)
        for (const auto& t : fp.tensors) {
            take(t);
            if (rows) rep.tensors.push_back({t, nullptr, "", "", 0});
        }
    rep.records_checked = fp.records.size();
    for (const RecordInfo& e : c.records()) {
        rep.bytes_read += e.size;
        rep.records_without_crc += (c.format() == Format::torch_zip || c.format() == Format::torchscript) && !e.has_crc && e.size;
    }

    locate_non_finite(c, all, values);
    integrity_findings(c, fp, std::move(values), *o.policy, rep.findings);
    if (c.dist()) dist_findings(c, rep.findings, rep.records_checked, rep.bytes_read);
    std::vector<Finding> opt = check_optimizers(c);
    rep.findings.insert(rep.findings.end(), opt.begin(), opt.end());
    if (ref) {
        if (!o.key_globs.empty() || !o.ignore_globs.empty())
            ref->tensors.erase(std::remove_if(ref->tensors.begin(), ref->tensors.end(),
                                              [&](const TensorPrint& t) { return !key_selected(o.key_globs, o.ignore_globs, t.key); }),
                               ref->tensors.end());
        compare(rep, *ref);
    }
    if (fingerprint_out) *fingerprint_out = std::move(fp);
    return rep;
}

VerifyReport verify(const Checkpoint& c, const VerifyOptions& o, Fingerprint* fingerprint_out, ReferenceAhead* ahead) {
    return naming_file(c.path(), [&] { return verify_unnamed(c, o, fingerprint_out, ahead); });
}

namespace {

nlohmann::json verdict_json(const VerifyReport& r, const TensorVerdict& v) {
    nlohmann::json t = print_json(v.print);
    if (r.reference) {
        t["status"] = v.status;
        t["reference"] = v.reference ? stats_json(*v.reference) : nlohmann::json(nullptr);
        if (v.status == "drift") {
            t["worst_stat"] = v.worst_stat;
            t["relative_change"] = std::isinf(v.relative_change) ? nlohmann::json("inf") : nlohmann::json(v.relative_change);
        }
    }
    return t;
}

nlohmann::json finding_json(const Finding& f) {
    nlohmann::json x = {{"kind", f.kind}, {"key", f.key}, {"message", f.message}};
    if (f.kind == "drift") x["relative_change"] = std::isinf(f.relative_change) ? nlohmann::json("inf") : nlohmann::json(f.relative_change);
    return x;
}

// The report without its rows: "findings" and "tensors" are empty arrays.
nlohmann::json verify_head(const VerifyReport& r) {
    nlohmann::json j = report_head("verify");
    j["file"] = r.file;
    j["reference"] = r.reference ? nlohmann::json(*r.reference) : nlohmann::json(nullptr);
    j["ok"] = r.ok();
    j["options"] = {{"rtol", r.options.rtol}, {"atol", r.options.atol}, {"exact", r.options.exact},
                    {"scope", r.options.all ? "all" : "state_dict"}};
    j["records_checked"] = r.records_checked;
    j["records_without_crc"] = r.records_without_crc;
    j["bytes_read"] = r.bytes_read;
    j["notes"] = r.notes;
    j["findings"] = nlohmann::json::array();
    j["tensors"] = nlohmann::json::array();
    return j;
}

}  // namespace

nlohmann::json to_json(const VerifyReport& r) {
    nlohmann::json j = verify_head(r);
    for (const auto& f : r.findings) j["findings"].push_back(finding_json(f));
    for (const auto& v : r.tensors) j["tensors"].push_back(verdict_json(r, v));
    return j;
}

void write_json(const VerifyReport& r, const std::function<void(std::string_view)>& sink) {
    write_json_streamed(verify_head(r), 2,
                        {{"findings", [&](const JsonRowSink& row) { for (const auto& f : r.findings) row(finding_json(f)); }},
                         {"tensors", [&](const JsonRowSink& row) { for (const auto& v : r.tensors) row(verdict_json(r, v)); }}},
                        sink);
}

void render_text(const VerifyReport& r, std::ostream& out, const TextStyle& style) {
    Paint paint{style.color};
    size_t compared = r.tensors_read;
    out << paint("1", r.file);
    if (r.reference) out << " vs " << paint("1", *r.reference);
    out << ": ";
    if (r.ok()) out << paint("32", "ok");
    else out << paint("31", std::to_string(r.findings.size()) + (r.findings.size() == 1 ? " finding" : " findings"));
    bool unread = std::any_of(r.findings.begin(), r.findings.end(), [](const Finding& f) { return f.kind == "record_frame"; }) &&
                  !r.tensors_read;
    if (unread) {
        out << " — no value read: records cannot be found";
    } else {
        out << " — " << compared << " tensors, ";
        if (r.records_checked) out << r.records_checked << " records (CRC-32), ";
        else out << "no CRC-32 in this format, ";
        if (r.records_without_crc) out << r.records_without_crc << " without one, ";
        out << human_bytes(r.bytes_read) << " read";
    }
    if (r.reference)
        out << "; " << (r.options.exact ? std::string("exact content") : "rtol " + repr_float(r.options.rtol) + ", atol " + repr_float(r.options.atol));
    out << "\n";
    std::unordered_map<std::string, size_t> shown;
    for (const auto& f : r.findings) {
        if (++shown[f.kind] > 20) continue;
        const char* color = f.kind == "drift" || f.kind == "nan" || f.kind == "inf" ? "33" : "31";
        out << "  " << paint(color, f.kind) << "  " << f.message << "\n";
    }
    for (const auto& [kind, n] : shown)
        if (n > 20) out << "  … " << n - 20 << " more " << kind << " findings (--json lists all)\n";
    for (const auto& n : r.notes) out << "note: " << n << "\n";
    if (shown.count("missing") && shown.count("extra"))
        out << "note: the key sets differ; `ckpt-tool diff-keys " << shell_quote(r.file) << " "
            << shell_quote(*r.reference) << "` finds the prefix change that fixes them\n";
}

namespace {
// "verify: NaN", "verify: CRC mismatch" …: the finding's kind in words (index_* and other kinds of
// Checkpoint::problems() with their underscores as spaces).
std::string finding_title(const std::string& kind) {
    static const std::unordered_map<std::string, const char*> words = {
        {"crc_mismatch", "CRC mismatch"}, {"mixed_saves", "parts of two saves"}, {"record_frame", "broken record"}, {"nan", "NaN"}, {"inf", "Inf"}, {"missing", "missing tensor"},
        {"extra", "extra tensor"}, {"changed", "changed tensor"}};
    auto it = words.find(kind);
    std::string title = it != words.end() ? it->second : kind;
    std::replace(title.begin(), title.end(), '_', ' ');
    return "verify: " + title;
}
}  // namespace

std::vector<Annotation> github_annotations(const VerifyReport& r) {
    std::vector<Annotation> out;
    for (const auto& f : r.findings) out.push_back({"error", r.file, finding_title(f.kind), f.message});
    return out;
}

}  // namespace ckpt
