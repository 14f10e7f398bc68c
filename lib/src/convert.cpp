#include "ckpt/convert.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <ostream>
#include <tuple>
#include <unordered_map>

#include "ckpt/atomic_file.hpp"
#include "ckpt/error.hpp"
#include "ckpt/fingerprint.hpp"
#include "ckpt/mapped_file.hpp"
#include "ckpt/report.hpp"
#include "ckpt/safetensors.hpp"
#include "ckpt/zip.hpp"

namespace ckpt {

namespace {

bool ends_with(const std::string& s, const std::string& p) {
    return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

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

struct Planned {
    std::string name;
    size_t tensor;
    uint64_t begin = 0, end = 0;  // offsets in the data buffer
};

}  // namespace

ConvertReport convert(const ConvertRequest& rq) {
    ConvertReport r;
    r.input = rq.input;
    r.output = rq.output;
    r.format = target_format(rq);
    if (r.format != "safetensors")
        throw Error(ErrorKind::unsupported, rq.output, "writing .pth files is not supported yet (only pth → safetensors)");
    struct stat st {};
    if (::stat(rq.output.c_str(), &st) == 0) {
        struct stat in {};
        if (::stat(rq.input.c_str(), &in) == 0 && in.st_dev == st.st_dev && in.st_ino == st.st_ino)
            throw Error(ErrorKind::usage, rq.output, "is the input file");
        if (!rq.force) throw Error(ErrorKind::usage, rq.output, "exists (use --force to overwrite)");
    }

    std::unique_ptr<Checkpoint> c = Checkpoint::open(rq.input, rq.open);
    if (!c->problems().empty())
        throw Error(ErrorKind::corrupt, rq.input, "will not convert a damaged checkpoint: " + c->problems().front().message);
    const StateDict& sd = c->state_dict();
    if (sd.kind == StateDictKind::none)
        throw Error(ErrorKind::usage, rq.input, "no state dict (a mapping of names to tensors) found; name it with --state-dict-key");
    if (sd.kind == StateDictKind::dict)
        for (size_t i = 0; i < sd.value->dict_size(); ++i)
            if (sd.value->dict_key(i)->kind == ValueKind::string && sd.value->dict_value(i)->kind != ValueKind::tensor)
                r.skipped.emplace_back(sd.value->dict_key(i)->s);

    // One entry per distinct view; the others are aliases of the first.
    using View = std::tuple<size_t, int64_t, std::vector<int64_t>, std::vector<int64_t>, DType>;
    std::map<View, std::string> first_name;
    std::vector<Planned> planned;
    for (const auto& e : sd.entries) {
        size_t ti = *c->entries()[e.entry].tensor;
        const TensorInfo& t = c->tensors()[ti];
        if (e.name == "__metadata__") throw Error(ErrorKind::unsupported, rq.input, "a tensor named __metadata__ cannot go into safetensors");
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
    std::stable_sort(planned.begin(), planned.end(), [&](const Planned& a, const Planned& b) {
        uint64_t sa = dtype_size(c->tensors()[a.tensor].dtype), sb = dtype_size(c->tensors()[b.tensor].dtype);
        return sa != sb ? sa > sb : a.name < b.name;
    });
    nlohmann::ordered_json header;
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    meta["format"] = "pt";
    for (const auto& [alias, kept] : r.deduplicated) meta[alias] = kept;
    for (const auto& [k, v] : rq.metadata) meta[k] = v;
    header["__metadata__"] = meta;
    uint64_t at = 0;
    for (Planned& p : planned) {
        const TensorInfo& t = c->tensors()[p.tensor];
        p.begin = at;
        p.end = at + t.nbytes();
        at = p.end;
        header[p.name] = {{"dtype", *safetensors_dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {p.begin, p.end}}};
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    std::string prefix(8, '\0');
    for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);

    AtomicFile out(rq.output);
    write_all(out.fd(), prefix.data(), 8, 0, rq.output);
    write_all(out.fd(), text.data(), text.size(), 8, rq.output);
    uint64_t base = 8 + text.size();
    for (const Planned& p : planned) {
        const TensorInfo& t = c->tensors()[p.tensor];
        size_t record = *c->record_index(c->storages()[t.storage].record);
        auto in_file = c->record_file_offset(record);
        uint64_t esz = dtype_size(t.dtype);
        if (t.contiguous() && in_file) {  // the kernel copies it
            copy_range(c->file().fd(), *in_file + static_cast<uint64_t>(t.storage_offset) * esz, out.fd(), base + p.begin,
                       t.nbytes(), rq.output);
            continue;
        }
        RecordData data = c->record_data(record);
        uint64_t pos = base + p.begin;
        for_each_logical_bytes(t, data.view(), [&](const uint8_t* bytes, size_t n) {
            write_all(out.fd(), bytes, n, pos, rq.output);
            pos += n;
        });
    }
    r.tensors = planned.size();
    r.bytes_written = base + at;

    if (rq.verify) {
        auto fail = [&](const std::string& why) {
            throw Error(ErrorKind::corrupt, rq.output, "the written file does not read back as the input (" + why + "); nothing was written");
        };
        std::unique_ptr<Checkpoint> back;
        try {
            back = Checkpoint::open(out.temp_path());
        } catch (const Error& e) {
            fail(e.message());
        }
        ScanOptions so;
        Fingerprint want = fingerprint(*c, so), got = fingerprint(*back, so);
        std::unordered_map<std::string, const TensorPrint*> by_name;
        for (const auto& t : got.tensors) by_name.emplace(t.key, &t);
        if (got.tensors.size() != planned.size()) fail("tensor count");
        for (const auto& t : want.tensors) {
            bool alias = std::any_of(r.deduplicated.begin(), r.deduplicated.end(), [&](const auto& d) { return d.first == t.key; });
            if (alias) continue;
            auto it = by_name.find(t.key);
            if (it == by_name.end()) fail(t.key + " is missing");
            if (it->second->dtype != t.dtype || it->second->shape != t.shape || it->second->stats.hash != t.stats.hash)
                fail(t.key + " differs");
        }
        r.verified = true;
    }
    out.commit(rq.force);
    return r;
}

nlohmann::json to_json(const ConvertReport& r) {
    nlohmann::json j;
    j["schema_version"] = k_schema_version;
    j["tool"] = tool_json();
    j["command"] = "convert";
    j["input"] = r.input;
    j["outputs"] = {r.output};
    j["format"] = r.format;
    j["tensors"] = r.tensors;
    nlohmann::json d = nlohmann::json::array();
    for (const auto& [alias, kept] : r.deduplicated) d.push_back({{"alias", alias}, {"kept", kept}});
    j["deduplicated"] = std::move(d);
    j["skipped"] = r.skipped;
    j["made_contiguous"] = r.made_contiguous;
    j["bytes_written"] = r.bytes_written;
    j["verified"] = r.verified;
    return j;
}

void render_text(const ConvertReport& r, std::ostream& out, const TextStyle& style) {
    Paint paint{style.color};
    out << paint("1", r.input) << " → " << paint("1", r.output) << ": " << r.tensors << " tensors as " << r.format
        << ", " << human_bytes(r.bytes_written) << (r.verified ? ", read back and equal" : ", not verified (--no-verify)")
        << "\n";
    for (const auto& [alias, kept] : r.deduplicated)
        out << "  " << alias << paint("2", " = ") << kept << " (shared storage: stored once, alias in __metadata__)\n";
    if (r.made_contiguous) out << "  " << r.made_contiguous << " views written contiguous\n";
    for (const auto& s : r.skipped) out << "  " << paint("33", "skipped") << " " << s << " (not a tensor)\n";
}

}  // namespace ckpt
