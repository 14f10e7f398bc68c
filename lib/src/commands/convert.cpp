// convert: which writer a request goes to (safetensors, a new pth state dict, the whole checkpoint
// again, merge's tree), what the writers share (the cast rule, shard names, the index), the report.
#include "ckpt/convert.hpp"

#include "base/text_util.hpp"

#include <sys/stat.h>

#include <cctype>
#include <cstdlib>
#include <cstdio>
#include <functional>
#include <ostream>
#include <unordered_map>

#include "ckpt/atomic_file.hpp"
#include "ckpt/error.hpp"
#include "io/mapped_file.hpp"
#include "ckpt/report.hpp"
#include "io/json.hpp"
#include "stats/torch_backend.hpp"
#include "io/zip.hpp"
#include "commands/convert_detail.hpp"
#include "stats/tensor_stats.hpp"

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

void require_plain(const ConvertRequest& rq, const TensorInfo& t, std::string_view name, const char* format) {
    if (t.plain()) return;
    std::string what = t.no_data        ? "saved without its elements (on the " + (t.extra ? t.extra->device : std::string("meta")) + " device)"
                       : t.quantized()  ? "a quantized tensor (" + std::string(t.extra->qscheme) + ")"
                       : t.nested()     ? "a nested tensor"
                                                                                  : std::string("a ") + layout_name(t.layout) + " tensor";
    bool whole = rq.weights_only || rq.rename;  // a pth copy of the whole checkpoint keeps it as it is
    throw Error(ErrorKind::unsupported, rq.input,
                "tensor " + std::string(name) + " is " + what + ", which " + format + " cannot hold" +
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

ContentHash cast_hash(const Checkpoint& c, size_t ti, DType to) {
    const TensorInfo& t = c.tensors()[ti];
    size_t record = *c.storage_record(t.storage);
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

void check_outputs(const Checkpoint& c, const std::vector<std::string>& paths, bool force) {
    std::vector<std::string> reads = c.files_read();
    for (const auto& path : paths) check_output(path, reads, force);
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

}  // namespace detail

using namespace detail;

// Every tensor is written out in full (views contiguous): refused when that is far more than the
// input stores, naming the tensor that grows most, unless --allow-expansion.
static void check_expansion(const Checkpoint& c, const ConvertRequest& rq) {
    if (rq.allow_expansion) return;
    uint64_t out = 0, growth = 0;
    const TensorInfo* worst = nullptr;
    for (const TensorInfo& t : c.tensors()) {
        if (!t.strided_view()) continue;
        uint64_t esz = dtype_size(out_dtype(rq, t.dtype)), bytes = t.numel * esz;
        uint64_t stored = t.extent * dtype_size(t.dtype);
        out += bytes;
        if (bytes > stored && bytes - stored > growth) {
            growth = bytes - stored;
            worst = &t;
        }
    }
    uint64_t in = std::max<uint64_t>(c.file_size(), 1);
    if (out <= k_expansion_floor || out / k_expansion_factor <= in || !worst) return;
    std::string name;
    for (const Entry& e : c.entries())
        if (e.tensor && &c.tensors()[*e.tensor] == worst) {
            name = std::string(e.key);
            break;
        }
    throw Error(ErrorKind::limit, rq.input,
                "the output would be " + human_bytes(out) + " from " + human_bytes(in) + " of input: tensor " + name + " (" +
                    shape_text(worst->shape) + ") views " + std::to_string(worst->extent) +
                    " stored elements as " + std::to_string(worst->numel) +
                    (worst->repeats() > 1 ? " (torch's expand, stride 0)" : " (overlapping strides)") +
                    ", written out in full; --allow-expansion writes it anyway");
}

static ConvertReport convert_unnamed(const ConvertRequest& rq) {
    ConvertReport r;
    r.input = rq.input;
    r.output = rq.output;
    r.format = target_format(rq);
    check_output(rq.output, {rq.input}, rq.force);  // before the open: a wrong target costs nothing

    OpenOptions open = rq.open;
    open.trace_pickle = r.format == "pth";  // pth → pth patches the pickle; safetensors needs no trace
    std::unique_ptr<Checkpoint> c = Checkpoint::open(rq.input, open);
    check_output(rq.output, c->files_read(), rq.force);  // a folder's rank files, a sharded input's shards
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
            const std::string name(e.name);
            std::string n = rq.rename(name);
            if (n.empty()) throw Error(ErrorKind::usage, rq.input, "the prefixes stripped leave tensor " + name + " without a name");
            auto [it, fresh] = of.emplace(n, name);
            if (!fresh) throw Error(ErrorKind::usage, rq.input, "stripping prefixes makes " + it->second + " and " + name + " both " + n);
            if (n != name) r.renamed.push_back({n, name});
        }
    }
    if (!rq.tree.empty()) {
        if (r.format != "pth") throw Error(ErrorKind::usage, rq.output, "a tree of values (not only tensors) is written as .pth only");
        check_expansion(*c, rq);
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
    if (whole) {  // the storages as they are: a view stays a view
        write_whole_pth(*c, rq, r);
        return r;
    }
    check_expansion(*c, rq);
    if (sd.kind == StateDictKind::none)
        throw Error(ErrorKind::usage, rq.input, "no state dict (a mapping of names to tensors) found; name it with --state-dict-key");
    r.dropped = others;
    for (const GlobalRef& g : c->globals())
        if (global_is_finding(g.cls)) r.globals_dropped.push_back(g.full_name() + " (" + global_class_name(g.cls) + ")");
    if (r.format == "pth") {
        write_state_dict_pth(*c, rq, r);
        return r;
    }
    write_safetensors(std::move(c), rq, r);
    return r;
}

ConvertReport convert(const ConvertRequest& rq) {
    return naming_file(rq.input, [&] { return convert_unnamed(rq); });
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
    j["globals_dropped"] = r.globals_dropped;
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
        out << "  " << shown(alias) << paint("2", " = ") << shown(kept)
            << (r.format == "pth" ? " (an alias in __metadata__: one storage again)\n"
                                  : " (shared storage: stored once, alias in __metadata__)\n");
    if (r.made_contiguous) out << "  " << r.made_contiguous << " views written contiguous\n";
    if (r.cast) out << "  " << r.cast << " floating-point tensors cast (PyTorch's rounding); integer and bool tensors kept\n";
    for (const auto& s : r.skipped) out << "  " << paint("33", "skipped") << " " << shown(s) << " (not a tensor)\n";
    if (!r.dropped.empty()) {
        out << "  " << paint("33", "dropped") << " (only the state dict is written):";
        for (const auto& d : r.dropped) out << " " << shown(d);
        out << "\n";
    }
    if (!r.globals_dropped.empty()) {
        out << "  " << paint("33", "not carried") << " (the input's globals off the allow-lists; the output names none of them):";
        for (const auto& g : r.globals_dropped) out << " " << shown(g);
        out << "\n";
    }
    if (!r.metadata_dropped.empty()) {
        out << "  " << paint("33", "not carried") << " (__metadata__ has no place in a pth file):";
        for (const auto& d : r.metadata_dropped) out << " " << shown(d);
        out << "\n";
    }
}

}  // namespace ckpt
