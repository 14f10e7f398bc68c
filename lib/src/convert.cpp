#include "ckpt/convert.hpp"

#include "text_util.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstdio>
#include <functional>
#include <map>
#include <string_view>
#include <system_error>
#include <ostream>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "ckpt/atomic_file.hpp"
#include "ckpt/error.hpp"
#include "ckpt/fingerprint.hpp"
#include "ckpt/mapped_file.hpp"
#include "ckpt/pickle_writer.hpp"
#include "ckpt/zip_writer.hpp"
#include "ckpt/report.hpp"
#include "ckpt/safetensors.hpp"
#include "ckpt/torch_backend.hpp"
#include "ckpt/zip.hpp"
#include "convert_detail.hpp"
#include "tensor_stats.hpp"

namespace ckpt {

namespace {

using text::ends_with;

std::string target_format(const ConvertRequest& rq) {
    if (!rq.to.empty()) {
        if (rq.to != "safetensors" && rq.to != "pth")
            throw Error(ErrorKind::usage, rq.output, "--to " + rq.to + ": expected safetensors or pth");
        return rq.to;
    }
    if (ends_with(rq.output, ".safetensors")) return "safetensors";
    for (const char* ext : {".pth", ".pt", ".bin", ".ckpt"})
        if (ends_with(rq.output, ext)) return "pth";
    throw Error(ErrorKind::usage, rq.output, "cannot tell the format from the extension; give --to safetensors|pth");
}

}  // namespace

namespace detail {

void require_plain(const ConvertRequest& rq, const TensorInfo& t, const std::string& name, const char* format) {
    if (t.plain()) return;
    std::string what = t.no_data        ? "saved without its elements (on the " + (t.extra ? t.extra->device : std::string("meta")) + " device)"
                       : t.quantized()  ? "a quantized tensor (" + std::string(t.extra->qscheme) + ")"
                       : t.nested()     ? "a nested tensor"
                                                                                  : std::string("a ") + layout_name(t.layout) + " tensor";
    bool whole = rq.weights_only || rq.rename;  // a pth copy of the whole checkpoint keeps it as it is
    throw Error(ErrorKind::unsupported, rq.input,
                "tensor " + name + " is " + what + ", which " + format + " cannot hold" +
                    (t.no_data ? "" : whole ? "; convert to .pth without --weights-only or --strip-prefix keeps it as it is"
                                            : "; convert to .pth keeps it as it is"));
}

bool castable(DType d) {
    return d == DType::float32 || d == DType::float64 || d == DType::float16 || d == DType::bfloat16;
}

DType out_dtype(const ConvertRequest& rq, DType d) { return rq.dtype && castable(d) ? *rq.dtype : d; }

void cast_bytes(const TensorInfo& t, ByteView storage, DType to,
                const std::function<void(const uint8_t*, size_t)>& sink) {
    const TorchBackend& backend = TorchBackend::get();
    uint64_t esz = dtype_size(t.dtype);
    for_each_logical_bytes(t, storage, [&](const uint8_t* p, size_t n) {
        std::vector<uint8_t> cast = backend.cast(t.dtype, {p, n}, n / esz, to);
        sink(cast.data(), cast.size());
    });
}

std::string cast_hash(const Checkpoint& c, size_t ti, DType to) {
    const TensorInfo& t = c.tensors()[ti];
    size_t record = *c.record_index(c.storages()[t.storage].record);
    RecordData data = c.record_data(record);
    std::vector<uint8_t> bytes;
    cast_bytes(t, data.view(), to, [&](const uint8_t* p, size_t n) { bytes.insert(bytes.end(), p, p + n); });
    c.record_file(record).release(data.view());  // memory stays bounded by the largest tensor
    return buffer_stats(to, {bytes.data(), bytes.size()}, t.numel).hash;
}

std::vector<size_t> plan_shards(const std::vector<uint64_t>& sizes, uint64_t max, size_t& shards) {
    std::vector<size_t> shard_of;
    shards = 1;
    uint64_t in_shard = 0;
    for (uint64_t bytes : sizes) {
        if (max && in_shard > 0 && in_shard + bytes > max) {
            ++shards;
            in_shard = 0;
        }
        shard_of.push_back(shards - 1);
        in_shard += bytes;
    }
    return shard_of;
}

std::string shard_path(const std::string& output, size_t n, size_t count) {
    size_t slash = output.rfind('/');
    size_t dot = output.rfind('.');
    if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) dot = output.size();
    char part[64];
    std::snprintf(part, sizeof part, "-%05zu-of-%05zu", n + 1, count);
    return output.substr(0, dot) + part + output.substr(dot);
}

void check_absent(const std::vector<std::string>& paths, bool force) {
    struct stat st {};
    if (!force)
        for (const auto& path : paths)
            if (::stat(path.c_str(), &st) == 0) throw Error(ErrorKind::usage, path, "exists (use --force to overwrite)");
}

std::unique_ptr<AtomicFile> write_index(const std::string& path, uint64_t total_size,
                                        const std::vector<std::pair<std::string, std::string>>& weight_map,
                                        uint64_t& bytes_written) {
    nlohmann::ordered_json j;
    j["metadata"] = {{"total_size", total_size}};
    nlohmann::ordered_json map = nlohmann::ordered_json::object();
    for (const auto& [name, file] : weight_map) append_new_member(map, name, file);
    j["weight_map"] = map;
    std::string text = j.dump(2) + "\n";
    auto index = std::make_unique<AtomicFile>(path);
    write_all(index->fd(), text.data(), text.size(), 0, path);
    bytes_written += text.size();
    return index;
}

struct Planned {
    std::string name;
    size_t tensor;
    uint64_t begin = 0, end = 0;  // offsets in the data buffer
};

void read_back_failed(const ConvertRequest& rq, const std::string& why) {
    throw Error(ErrorKind::corrupt, rq.output, "the written file does not read back as the input (" + why + "); nothing was written");
}

std::unique_ptr<Checkpoint> reopen_written(const ConvertRequest& rq, const AtomicFile& out) {
    try {
        return Checkpoint::open(out.temp_path());
    } catch (const Error& e) {
        read_back_failed(rq, e.message());
    }
}

SourceHashes::SourceHashes(const Checkpoint& c, FingerprintOptions options, bool start) : m_checkpoint(c), m_options(std::move(options)) {
    if (!start) return;
    if (std::any_of(c.records().begin(), c.records().end(), [](const RecordInfo& r) { return !r.pieces.empty(); })) {
        m_offered = true;
        for (size_t t = 0; t < c.tensors().size(); ++t)
            m_tensors_of_record[c.storages()[c.tensors()[t].storage].record].push_back(t);
        return;
    }
    FingerprintOptions o = m_options;
    o.threads = 1;  // the other core is copying
    o.progress = [this](uint64_t, uint64_t) {
        if (m_cancel) throw Error(ErrorKind::io, m_checkpoint.path(), "cancelled");
    };
    try {
        m_thread = std::thread([this, o] {
            try {
                m_fingerprint = fingerprint(m_checkpoint, o);
            } catch (...) {
                m_error = std::current_exception();
            }
        });
    } catch (const std::system_error&) {
        // No thread: get() scans in this one.
    }
}

SourceHashes::~SourceHashes() {
    m_cancel = true;
    if (m_thread.joinable()) m_thread.join();
}

const Fingerprint& SourceHashes::get() {
    if (m_thread.joinable()) m_thread.join();
    if (m_error) std::rethrow_exception(m_error);
    if (!m_fingerprint) {
        FingerprintOptions o = m_options;
        if (m_offered)
            o.known = [this](size_t t, TensorStats& out) {
                auto it = m_known.find(t);
                if (it == m_known.end()) return false;
                out = it->second;
                return true;
            };
        m_fingerprint = fingerprint(m_checkpoint, o);
    }
    return *m_fingerprint;
}

void SourceHashes::offer(size_t record, ByteView bytes) {
    if (!m_offered || m_fingerprint) return;
    const RecordInfo& rec = m_checkpoint.records()[record];
    auto it = m_tensors_of_record.find(rec.name);
    if (it == m_tensors_of_record.end() || bytes.size != rec.size) return;
    for (size_t t : it->second) {
        const TensorInfo& ti = m_checkpoint.tensors()[t];
        if (ti.numel && static_cast<uint64_t>(ti.storage_offset) + ti.extent > rec.size / dtype_size(ti.dtype)) continue;  // get() reports it
        m_known[t] = stats_over(ti.dtype, bytes.data, &ti, ti.numel, nullptr, m_options.hash_only);
    }
}

// The output opened again by the same checking readers as any input, and every tensor's content
// hash compared with the source's (aliases with the tensor they alias). The output is hashed first:
// the source's hashes may still be on their way from the other core.
void verify_written(const Checkpoint* c, const ConvertRequest& rq, AtomicFile& out, ConvertReport& r,
                    std::optional<size_t> expected_count, SourceHashes& source_hashes) {
    if (!rq.verify) return;
    auto fail = [&](const std::string& why) { read_back_failed(rq, why); };
    std::unique_ptr<Checkpoint> back = reopen_written(rq, out);
    FingerprintOptions so;
    so.hash_only = true;  // equal hashes are the test; the statistics would double the cost
    Fingerprint got = fingerprint(*back, so);
    const Fingerprint& want = source_hashes.get();
    std::unordered_map<std::string_view, const TensorPrint*> src;  // keys in `want`, which outlives it
    for (const auto& t : want.tensors) src.emplace(t.key, &t);
    std::unordered_map<std::string, std::string> alias_of;
    for (const auto& [alias, kept] : r.deduplicated) alias_of.emplace(alias, kept);
    std::unordered_map<std::string, std::string> input_name(r.renamed.begin(), r.renamed.end());
    auto original = [&](const std::string& name) {
        auto o = input_name.find(name);
        return o == input_name.end() ? name : o->second;
    };
    auto source = [&](const std::string& name) -> const TensorPrint* {
        auto a = alias_of.find(name);
        auto it = src.find(original(a == alias_of.end() ? name : a->second));
        return it == src.end() ? nullptr : it->second;
    };
    size_t expected = 0;
    std::unordered_set<std::string> alias_inputs;
    for (const auto& [alias, kept] : alias_of) alias_inputs.insert(original(alias));
    for (const auto& t : want.tensors) expected += !(r.format == "safetensors" && alias_inputs.count(t.key));
    if (r.format == "pth") expected += r.deduplicated.size();
    if (expected_count) expected = *expected_count;
    if (got.tensors.size() != expected) fail("tensor count " + std::to_string(got.tensors.size()) + ", expected " + std::to_string(expected));
    // With --dtype the expected bytes are the source's cast again, independently of the writer.
    std::unordered_map<std::string, size_t> source_tensor;
    if (rq.dtype)
        for (const auto& e : c->state_dict().entries) source_tensor.emplace(e.name, *c->entries()[e.entry].tensor);
    for (const auto& t : got.tensors) {
        const TensorPrint* s = source(t.key);
        if (!s) fail(t.key + " is not in the input");
        auto dt = dtype_from_name(s->dtype);
        DType want_dtype = dt ? out_dtype(rq, *dt) : DType::float32;
        std::string want_hash = s->stats.hash;
        if (dt && want_dtype != *dt) {
            auto a = alias_of.find(t.key);
            want_hash = cast_hash(*c, source_tensor.at(original(a == alias_of.end() ? t.key : a->second)), want_dtype);
        }
        if (t.dtype != dtype_name(want_dtype) || s->shape != t.shape || t.stats.hash != want_hash) fail(t.key + " differs");
    }
    r.verified = true;
}

}  // namespace detail

using namespace detail;

ConvertReport convert(const ConvertRequest& rq) {
    ConvertReport r;
    r.input = rq.input;
    r.output = rq.output;
    r.format = target_format(rq);
    struct stat st {};
    if (::stat(rq.output.c_str(), &st) == 0) {
        struct stat in {};
        if (::stat(rq.input.c_str(), &in) == 0 && in.st_dev == st.st_dev && in.st_ino == st.st_ino)
            throw Error(ErrorKind::usage, rq.output, "is the input file");
        if (!rq.force) throw Error(ErrorKind::usage, rq.output, "exists (use --force to overwrite)");
    }

    OpenOptions open = rq.open;
    open.trace_pickle = true;  // pth → pth patches the pickle
    std::unique_ptr<Checkpoint> c = Checkpoint::open(rq.input, open);
    if (!c->problems().empty())
        throw Error(ErrorKind::corrupt, rq.input, "will not convert a damaged checkpoint: " + c->problems().front().message);
    if (c->byteorder() == "big")
        throw Error(ErrorKind::unsupported, rq.input, "a big-endian checkpoint: its tensor bytes would need swapping, which convert does not do");
    const StateDict& sd = c->state_dict();
    // The top-level objects besides the state dict (optimizer, epoch, args): kept only by pth → pth.
    std::vector<std::string> others;
    bool root_is_state_dict = sd.kind == StateDictKind::dict && sd.path.empty();
    if (c->format() != Format::safetensors && c->shards().empty() && c->root()->kind == ValueKind::dict && !root_is_state_dict)
        for (size_t i = 0; i < c->root()->dict_size(); ++i) {
            std::string k = key_part(c->root()->dict_key(i));
            if (sd.kind == StateDictKind::none || (k != sd.path && sd.path.rfind(k + ".", 0) != 0)) others.push_back(k);
        }
    if (rq.rename) {  // the written names: each one once
        std::unordered_map<std::string, std::string> of;
        for (const auto& e : sd.entries) {
            std::string n = rq.rename(e.name);
            if (n.empty()) throw Error(ErrorKind::usage, rq.input, "the prefixes stripped leave tensor " + e.name + " without a name");
            auto [it, fresh] = of.emplace(n, e.name);
            if (!fresh) throw Error(ErrorKind::usage, rq.input, "stripping prefixes makes " + it->second + " and " + e.name + " both " + n);
            if (n != e.name) r.renamed.push_back({n, e.name});
        }
    }
    if (!rq.tree.empty()) {
        if (r.format != "pth") throw Error(ErrorKind::usage, rq.output, "a tree of values (not only tensors) is written as .pth only");
        write_tree_pth(*c, rq, r);
        return r;
    }
    bool whole = r.format == "pth" && (c->format() == Format::torch_zip || c->format() == Format::legacy) && c->shards().empty() &&
                 !rq.weights_only && !rq.rename;
    if (whole && rq.max_shard_size) {
        if (!root_is_state_dict)
            throw Error(ErrorKind::usage, rq.input, "--max-shard-size shards a state dict; this checkpoint holds more" +
                                                         (others.empty() ? std::string() : " (" + others.front() + "…)") +
                                                         ": add --weights-only to shard its state dict");
        whole = false;  // a bare state dict: shards of it
    }
    if (whole) {
        write_whole_pth(*c, rq, r);
        return r;
    }
    if (sd.kind == StateDictKind::none)
        throw Error(ErrorKind::usage, rq.input, "no state dict (a mapping of names to tensors) found; name it with --state-dict-key");
    r.dropped = others;
    if (r.format == "pth") {
        write_state_dict_pth(*c, rq, r);
        return r;
    }
    if (sd.kind == StateDictKind::dict)
        for (size_t i = 0; i < sd.value->dict_size(); ++i)
            if (sd.value->dict_key(i)->kind == ValueKind::string && sd.value->dict_value(i)->kind != ValueKind::tensor)
                r.skipped.emplace_back(sd.value->dict_key(i)->s);

    // One entry per distinct view; the others are aliases of the first.
    using View = std::tuple<size_t, int64_t, std::vector<int64_t>, std::vector<int64_t>, DType>;
    std::map<View, std::string> first_name;
    std::vector<Planned> planned;
    for (const auto& entry : sd.entries) {
        StateDictEntry e{written_name(rq, entry.name), entry.entry};
        size_t ti = *c->entries()[e.entry].tensor;
        const TensorInfo& t = c->tensors()[ti];
        if (e.name == "__metadata__") throw Error(ErrorKind::unsupported, rq.input, "a tensor named __metadata__ cannot go into safetensors");
        require_plain(rq, t, e.name, "safetensors");
        if (!safetensors_dtype_name(t.dtype))
            throw Error(ErrorKind::unsupported, rq.input,
                        "tensor " + e.name + " is " + std::string(dtype_name(t.dtype)) + ", which safetensors cannot hold");
        View v{t.storage, t.storage_offset, t.shape, t.stride, t.dtype};
        auto [it, fresh] = first_name.emplace(v, e.name);
        if (!fresh) {
            r.deduplicated.push_back({e.name, it->second});
            continue;
        }
        planned.push_back({e.name, ti});
        r.made_contiguous += !t.contiguous();
    }
    first_name.clear();  // a node of shapes and strides per tensor, not needed past the plan
    // Shards in state-dict order, each at most --max-shard-size (a tensor larger than that gets a
    // shard of its own), named as Hugging Face names them.
    std::vector<uint64_t> sizes;
    uint64_t total = 0;
    for (const Planned& p : planned) {
        sizes.push_back(c->tensors()[p.tensor].numel * dtype_size(out_dtype(rq, c->tensors()[p.tensor].dtype)));
        total += sizes.back();
    }
    size_t count = 0;
    std::vector<size_t> shard_of_tensor = plan_shards(sizes, rq.max_shard_size, count);
    std::vector<std::vector<Planned>> shards(count);
    for (size_t i = 0; i < planned.size(); ++i) shards[shard_of_tensor[i]].push_back(std::move(planned[i]));
    r.tensors = planned.size();
    planned = {};
    std::vector<std::string> paths;
    for (size_t n = 0; n < count; ++n) paths.push_back(count == 1 ? rq.output : shard_path(rq.output, n, count));
    std::string index_path = rq.output + ".index.json";
    if (count > 1) {
        std::vector<std::string> all = paths;
        all.push_back(index_path);
        check_absent(all, rq.force);
    }
    // The input's own __metadata__ (safetensors) is carried into every shard; an alias entry only into
    // the shard that holds the tensor it names.
    std::unordered_set<std::string> tensor_names;
    for (const auto& e : sd.entries) tensor_names.insert(written_name(rq, e.name));

    std::unordered_map<std::string_view, size_t> shard_of;  // names of the (no longer moved) plans
    std::vector<std::unique_ptr<AtomicFile>> files;
    uint64_t written = 0;
    FingerprintOptions hashes;
    hashes.hash_only = true;  // equal hashes are the read-back's test; the statistics would double the cost
    SourceHashes source(*c, hashes, rq.verify);
    for (size_t n = 0; n < shards.size(); ++n) {
        std::vector<Planned>& shard = shards[n];
        std::stable_sort(shard.begin(), shard.end(), [&](const Planned& a, const Planned& b) {
            uint64_t sa = dtype_size(out_dtype(rq, c->tensors()[a.tensor].dtype)), sb = dtype_size(out_dtype(rq, c->tensors()[b.tensor].dtype));
            return sa != sb ? sa > sb : a.name < b.name;
        });
        for (const Planned& p : shard) shard_of.emplace(p.name, n);
        nlohmann::ordered_json meta = nlohmann::ordered_json::object();
        meta["format"] = "pt";
        auto in_shard = [&](const std::string& name) {
            return std::any_of(shard.begin(), shard.end(), [&](const Planned& p) { return p.name == name; });
        };
        for (const auto& [k, v] : c->metadata())
            if (!tensor_names.count(v) || tensor_names.count(k) || in_shard(v)) meta[k] = v;
        for (const auto& [alias, kept] : r.deduplicated)
            if (in_shard(kept)) meta[alias] = kept;
        for (const auto& [k, v] : rq.metadata) meta[k] = v;
        // The header as nlohmann's dump() lays it out, written here: as a document, 100,000 tensors
        // held some 60 MiB of nodes.
        std::string text = "{\"__metadata__\":" + meta.dump();
        uint64_t at = 0;
        for (Planned& p : shard) {
            const TensorInfo& t = c->tensors()[p.tensor];
            p.begin = at;
            p.end = at + t.numel * dtype_size(out_dtype(rq, t.dtype));
            at = p.end;
            text += ',';
            append_json_string(text, p.name, false);
            text.append(":{\"dtype\":\"").append(*safetensors_dtype_name(out_dtype(rq, t.dtype))).append("\",\"shape\":[");
            for (size_t d = 0; d < t.shape.size(); ++d) text.append(d ? "," : "").append(std::to_string(t.shape[d]));
            text.append("],\"data_offsets\":[").append(std::to_string(p.begin)).append(",");
            text.append(std::to_string(p.end)).append("]}");
            r.cast += out_dtype(rq, t.dtype) != t.dtype;
        }
        text += '}';
        text.append((8 - text.size() % 8) % 8, ' ');
        std::string prefix = le_bytes(text.size(), 8);

        files.push_back(std::make_unique<AtomicFile>(paths[n]));
        AtomicFile& out = *files.back();
        WritebackHint writeback(out.fd());
        write_all(out.fd(), prefix.data(), 8, 0, paths[n]);
        write_all(out.fd(), text.data(), text.size(), 8, paths[n]);
        uint64_t base = 8 + text.size();
        for (const Planned& p : shard) {
            const TensorInfo& t = c->tensors()[p.tensor];
            size_t record = *c->record_index(c->storages()[t.storage].record);
            auto in_file = c->record_file_offset(record);
            uint64_t esz = dtype_size(t.dtype);
            DType to = out_dtype(rq, t.dtype);
            uint64_t pos = base + p.begin;
            auto sink = [&](const uint8_t* bytes, size_t len) {
                write_all(out.fd(), bytes, len, pos, paths[n]);
                pos += len;
            };
            if (to != t.dtype) {
                RecordData data = c->record_data(record);
                source.offer(record, data.view());
                cast_bytes(t, data.view(), to, sink);
            } else if (t.contiguous() && in_file) {  // the kernel copies it
                copy_range(c->record_file(record).fd(), *in_file + static_cast<uint64_t>(t.storage_offset) * esz, out.fd(), pos,
                           t.nbytes(), paths[n]);
            } else {
                RecordData data = c->record_data(record);
                source.offer(record, data.view());
                for_each_logical_bytes(t, data.view(), sink);
            }
            writeback.written_up_to(base + p.end);
            written += p.end - p.begin;
            if (rq.progress) rq.progress(written, total);
        }
        r.bytes_written += base + at;
        out.start_sync();  // the disk writes while the output is read back from the page cache
        if (count == 1 && rq.verify && !rq.dtype) {
            // Without a cast the source's hashes are all the check needs of it: closed before the
            // output is opened, the two are never open at once (100,000 tensors: ~400 MiB each).
            source.get();
            c.reset();
        }
        ConvertRequest shard_rq = rq;
        shard_rq.output = paths[n];
        verify_written(c.get(), shard_rq, out, r, shard.size(), source);
    }
    std::unique_ptr<AtomicFile> index;
    if (count > 1) {
        std::vector<std::pair<std::string, std::string>> weight_map;
        for (const auto& e : sd.entries) {
            std::string name = written_name(rq, e.name);
            auto it = shard_of.find(name);
            if (it != shard_of.end()) weight_map.push_back({name, base_name(paths[it->second])});  // aliases: under their kept name
        }
        index = write_index(index_path, total, weight_map, r.bytes_written);
    }
    commit_set(files, index.get(), rq.force);
    r.outputs = paths;
    if (index) r.outputs.push_back(index_path);
    return r;
}

uint64_t parse_size(const std::string& text) {
    size_t i = 0;
    while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
    std::string number = text.substr(0, i), unit = text.substr(i);
    static const std::pair<const char*, double> k_units[] = {
        {"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
        {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
    for (const auto& [name, factor] : k_units)
        if (unit == name && !number.empty()) {
            double v = std::strtod(number.c_str(), nullptr) * factor;
            if (v >= 1 && v < 1.8e19) return static_cast<uint64_t>(v);
        }
    throw Error(ErrorKind::usage, "", "size '" + text + "': expected a number and one of B, KB, MB, GB, TB, KiB, MiB, GiB, TiB");
}

nlohmann::json to_json(const ConvertReport& r) {
    nlohmann::json j = report_head("convert");
    j["input"] = r.input;
    j["outputs"] = r.outputs;
    j["format"] = r.format;
    j["tensors"] = r.tensors;
    nlohmann::json d = nlohmann::json::array();
    for (const auto& [alias, kept] : r.deduplicated) d.push_back({{"alias", alias}, {"kept", kept}});
    j["deduplicated"] = std::move(d);
    j["skipped"] = r.skipped;
    j["dropped"] = r.dropped;
    j["metadata_dropped"] = r.metadata_dropped;
    j["made_contiguous"] = r.made_contiguous;
    j["cast"] = r.cast;
    j["bytes_written"] = r.bytes_written;
    j["verified"] = r.verified;
    return j;
}

void render_text(const ConvertReport& r, std::ostream& out, const TextStyle& style) {
    Paint paint{style.color};
    std::string where = r.outputs.size() > 1 ? std::to_string(r.outputs.size() - 1) + " shards + " +
                                                  text::base_name(r.outputs.back())
                                            : r.output;
    out << paint("1", r.input) << " → " << paint("1", where) << ": " << r.tensors << " tensors as " << r.format
        << ", " << human_bytes(r.bytes_written) << (r.verified ? ", read back and equal" : ", not verified (--no-verify)")
        << "\n";
    for (const auto& [alias, kept] : r.deduplicated)
        out << "  " << alias << paint("2", " = ") << kept
            << (r.format == "pth" ? " (an alias in __metadata__: one storage again)\n"
                                  : " (shared storage: stored once, alias in __metadata__)\n");
    if (r.made_contiguous) out << "  " << r.made_contiguous << " views written contiguous\n";
    if (r.cast) out << "  " << r.cast << " floating-point tensors cast (PyTorch's rounding); integer and bool tensors kept\n";
    for (const auto& s : r.skipped) out << "  " << paint("33", "skipped") << " " << s << " (not a tensor)\n";
    if (!r.dropped.empty()) {
        out << "  " << paint("33", "dropped") << " (only the state dict is written):";
        for (const auto& d : r.dropped) out << " " << d;
        out << "\n";
    }
    if (!r.metadata_dropped.empty()) {
        out << "  " << paint("33", "not carried") << " (__metadata__ has no place in a pth file):";
        for (const auto& d : r.metadata_dropped) out << " " << d;
        out << "\n";
    }
}

}  // namespace ckpt
