// convert's read-back: the written file opened again by the same checking readers as any input, and
// every tensor's content hash compared with the source's, the source's hashes taken on the other core
// while the output is written.
#include <algorithm>
#include <system_error>
#include <unordered_map>
#include <unordered_set>

#include "commands/convert_detail.hpp"
#include "ckpt/error.hpp"
#include "formats/gather.hpp"
#include "stats/prints_by_key.hpp"
#include "stats/tensor_stats.hpp"

namespace ckpt::detail {

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

bool SourceHashes::stream(size_t record, const std::function<void(ByteView)>& sink, uint32_t* crc) {
    if (!m_offered) return false;
    const RecordInfo& rec = m_checkpoint.records()[record];
    auto it = m_tensors_of_record.find(rec.name);
    if (rec.pieces.empty() || it == m_tensors_of_record.end() || it->second.size() != 1) return false;
    size_t t = it->second.front();
    const TensorInfo& ti = m_checkpoint.tensors()[t];
    if (!ti.contiguous() || ti.storage_offset != 0 || ti.nbytes() != rec.size) return false;
    bool hash = !m_fingerprint;
    StatsStream pass(ti.dtype, crc, m_options.hash_only);
    detail::gather_runs(rec, [&](ByteView run) {
        if (hash || crc) pass.add(run);
        sink(run);
    });
    TensorStats s = pass.finish();
    if (hash) m_known[t] = std::move(s);
    return true;
}

// The output opened again by the same checking readers as any input, and every tensor's content
// hash compared with the source's (aliases with the tensor they alias), each print as the scan of
// the output hands it over: the source's hashes are taken first (as a rule done on the other core
// while the output was written).
void verify_written(const Checkpoint* c, const ConvertRequest& rq, AtomicFile& out, ConvertReport& r,
                    std::optional<size_t> expected_count, SourceHashes& source_hashes) {
    if (!rq.verify) return;
    auto fail = [&](const std::string& why) { read_back_failed(rq, why); };
    std::unique_ptr<Checkpoint> back = reopen_written(rq, out);
    const Fingerprint& want = source_hashes.get();
    // The source's prints by key (the first of a key), and the renames and aliases: no node or copy of
    // a name per tensor, and no lookup at all in the tables that are empty (as a rule they are).
    PrintsByKey src(want.tensors);
    std::unordered_map<std::string_view, std::string_view> alias_of, input_name;  // views of r's names
    for (const auto& [alias, kept] : r.deduplicated) alias_of.emplace(alias, kept);
    for (const auto& [name, input] : r.renamed) input_name.emplace(name, input);
    auto original = [&](std::string_view name) -> std::string_view {
        if (input_name.empty()) return name;
        auto o = input_name.find(name);
        return o == input_name.end() ? name : o->second;
    };
    auto kept_of = [&](std::string_view name) -> std::string_view {
        if (alias_of.empty()) return name;
        auto a = alias_of.find(name);
        return a == alias_of.end() ? name : a->second;
    };
    auto source = [&](std::string_view name) -> const TensorPrint* {
        size_t i = src.find(original(kept_of(name)));
        return i == PrintsByKey::npos ? nullptr : &want.tensors[i];
    };
    // Every source tensor comes back, aliases too: a pth file keeps them as shared storage, a
    // safetensors file as __metadata__ entries its reader makes entries again.
    size_t expected = expected_count ? *expected_count : want.tensors.size();
    // With --dtype the expected bytes are the source's cast again, independently of the writer.
    std::unordered_map<std::string_view, size_t> source_tensor;  // the input's names, open until the end
    if (rq.dtype)
        for (const auto& e : c->state_dict().entries) source_tensor.emplace(e.name, *c->entries()[e.entry].tensor);
    // Each of the output's prints compared as the scan hands it over, not kept (100,000 prints were
    // 20 MiB at convert's peak); the count is said first, as when they were kept.
    size_t got = 0;
    std::string first_difference;
    FingerprintOptions so;
    so.hash_only = true;  // equal hashes are the test; the statistics would double the cost
    so.take = [&](TensorPrint&& t) {
        ++got;
        if (!first_difference.empty()) return;
        const TensorPrint* s = source(t.key);
        if (!s) {
            first_difference = t.key + " is not in the input";
            return;
        }
        auto dt = dtype_from_name(s->dtype);
        DType want_dtype = dt ? out_dtype(rq, *dt) : DType::float32;
        ContentHash want_hash = s->stats.hash;
        if (dt && want_dtype != *dt) want_hash = cast_hash(*c, source_tensor.at(original(kept_of(t.key))), want_dtype);
        if (t.dtype != dtype_name(want_dtype) || s->shape != t.shape || t.stats.hash != want_hash) first_difference = t.key + " differs";
    };
    fingerprint(*back, so);
    if (got != expected) fail("tensor count " + std::to_string(got) + ", expected " + std::to_string(expected));
    if (!first_difference.empty()) fail(first_difference);
    r.verified = true;
}

}  // namespace ckpt::detail
