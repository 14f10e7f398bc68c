// Fingerprints: per-tensor statistics and a content hash, read in place from the mapped storages.
//
// Every number is accumulated in float64 from the tensor's elements in row-major (logical) order,
// views and transposes walked through their strides (no copy of a whole tensor is made):
//   mean, std (unbiased, as torch.std), min, max, abs_mean (mean of |x|), l2 (sqrt of the sum of
//   squares), nan and inf counts; NaN and Inf propagate as they do in torch (a tensor holding a NaN
//   has a NaN mean, min and max). float16, bfloat16 and the float8 types are decoded exactly; integer
//   and bool tensors are summarised as numbers (as t.double() would); complex tensors as
//   torch.view_as_real(t), their real and imaginary parts one list of 2·numel numbers. Statistics a
//   tensor cannot have are absent: everything for an empty tensor, std for a single number, and all
//   of them for dtypes that are not numbers here (quantized, untyped).
//   hash: XXH3-128 of the logical bytes in row-major order, so a view and its contiguous copy hash
//   the same; "xxh3-128:" and 32 hex digits.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/bytes.hpp"
#include "ckpt/checkpoint.hpp"

namespace ckpt {

// A statistic, or none (the mean of an empty tensor): std::optional<double> in 8 bytes, not 16 (a
// verify of 100,000 tensors holds 200,000 sets of six). None is a signalling NaN with a payload of its
// own, which no arithmetic makes (its NaNs are quiet), and the value is kept as its bits: a NaN that
// a statistic is (of a tensor holding NaN) stays a value.
class Stat {
public:
    Stat() = default;
    Stat(std::nullopt_t) {}  // NOLINT: as std::optional's
    Stat(double d) {         // NOLINT: as std::optional's
        std::memcpy(&m_bits, &d, sizeof d);
        if (m_bits == k_none) m_bits = k_quiet_nan;  // never none: that bit pattern is only made here
    }
    Stat(const std::optional<double>& o) : Stat() {  // NOLINT: as std::optional's
        if (o) *this = Stat(*o);
    }
    bool has_value() const { return m_bits != k_none; }
    explicit operator bool() const { return has_value(); }
    double operator*() const {
        double d;
        std::memcpy(&d, &m_bits, sizeof d);
        return d;
    }
    double value_or(double other) const { return has_value() ? **this : other; }
    void reset() { m_bits = k_none; }

private:
    static constexpr uint64_t k_none = 0x7ff4'0000'dead'beefULL;
    static constexpr uint64_t k_quiet_nan = 0x7ff8'0000'0000'0000ULL;
    uint64_t m_bits = k_none;
};

// A tensor's content hash: XXH3-128 of its logical bytes in row-major order, written
// "xxh3-128:" and 32 hex digits. Kept as its 16 bytes (a string was 32 bytes and an allocation of
// 48 a tensor); empty when the bytes could not be read.
class ContentHash {
public:
    ContentHash() = default;
    // The canonical (big-endian) bytes of the digest, as XXH128_canonicalFromHash gives them.
    explicit ContentHash(const unsigned char (&canonical)[16]) : m_set(true) { std::memcpy(m_bytes, canonical, 16); }
    // "xxh3-128:" and 32 lower- or upper-case hex digits; nullopt for anything else.
    static std::optional<ContentHash> parse(std::string_view text);
    bool empty() const { return !m_set; }
    std::string text() const;  // "" when empty
    friend bool operator==(const ContentHash& a, const ContentHash& b) {
        return a.m_set == b.m_set && std::memcmp(a.m_bytes, b.m_bytes, 16) == 0;
    }
    friend bool operator!=(const ContentHash& a, const ContentHash& b) { return !(a == b); }

private:
    unsigned char m_bytes[16] = {};
    bool m_set = false;
};

struct TensorStats {
    uint64_t count = 0;  // numbers summarised (numel; 2·numel for complex)
    Stat mean, std, min, max, abs_mean, l2;
    uint64_t nan = 0, inf = 0;
    ContentHash hash;
};

// The statistics of one tensor over the bytes of its storage. Throws Error(corrupt) when the
// tensor's extent does not fit `storage` (Checkpoint::problems() says so before anyone gets here).
TensorStats tensor_stats(const TensorInfo& t, ByteView storage);
// The tensor's logical bytes in row-major order, handed to `sink` in pieces (views into `storage`
// for contiguous runs, a gathered buffer for strided ones): what a writer of contiguous formats needs.
void for_each_logical_bytes(const TensorInfo& t, ByteView storage,
                            const std::function<void(const uint8_t*, size_t)>& sink);
// The same for `count` elements laid out contiguously (the backend's values, a test's buffer).
TensorStats buffer_stats(DType dtype, ByteView bytes, uint64_t count);

struct TensorPrint {
    std::string key;   // state-dict name (scope "state_dict") or full dotted key (scope "all")
    std::string dtype;
    Dims shape;
    TensorStats stats;
    bool readable = true;  // false when its storage record is missing or too short
};

struct RecordCrc {
    std::string_view record;  // RecordInfo::name: the checkpoint's text, valid while it is open
    uint32_t expected = 0, actual = 0;
    bool ok() const { return expected == actual; }
};

struct FingerprintOptions {
    bool all = false;                     // every tensor by key, not just the state dict by name
    std::vector<std::string> key_globs;   // only these keys (empty: all of the scope)
    std::vector<std::string> ignore_globs;  // and none of these
    bool check_crc = false;               // CRC-32 of every record, in the same pass
    bool hash_only = false;               // content hashes alone, no statistics (a writer's read-back)
    unsigned threads = 0;                 // 0: one per core
    // Statistics the caller already holds for a tensor (by index; a writer that hashed the bytes it
    // wrote): when it returns true with `out` filled, that tensor is not read again.
    std::function<bool(size_t tensor, TensorStats& out)> known;
    // Called now and then from the workers (under a lock) with bytes done and bytes in all.
    std::function<void(uint64_t, uint64_t)> progress;
    // When set, each print is handed to it, in file order, and Fingerprint::tensors stays empty: a
    // caller that keeps the prints in rows of its own (verify's verdicts) holds one table, not two.
    std::function<void(TensorPrint&&)> take;
};

struct Fingerprint {
    std::string file;
    uint64_t file_size = 0;
    std::string scope;                 // "state_dict" | "all"
    std::vector<TensorPrint> tensors;  // in file order
    std::vector<RecordCrc> records;    // with check_crc: every record, in directory order
};

// Reads every selected tensor (and with check_crc every record) once, spread over the cores: work is
// handed out one storage record at a time, largest first.
Fingerprint fingerprint(const Checkpoint& c, const FingerprintOptions& options);

// The documented JSON (docs/schema/fingerprint.schema.json); non-finite statistics are the strings
// "nan", "inf", "-inf".
nlohmann::json to_json(const Fingerprint& f);
// The same text as to_json(f).dump(1) and a newline (the file --write-fingerprint writes), a row at
// a time through `sink`.
void write_json(const Fingerprint& f, const std::function<void(std::string_view)>& sink);
nlohmann::json stats_json(const TensorStats& s);
// One row of "tensors": key, dtype, shape and the statistics (verify's rows add to it).
nlohmann::json print_json(const TensorPrint& t);
// Reads a fingerprint back: a --write-fingerprint file, or the JSON of verify (its tensors carry the
// same fields). Throws Error(format) naming `path` when it is neither.
Fingerprint fingerprint_from_json(const std::string& path, const nlohmann::json& j);
// The same from a file, without its whole document: each row of "tensors" is parsed, checked and
// dropped (100,000 rows are 38 MB of JSON and were ~140 MB as a document). nullopt when the file does
// not start like JSON (read_json_file's test); Error(format) naming `path` when it does not parse or
// is not a fingerprint (the same checks and messages as fingerprint_from_json), Error(usage) for an
// inspect report (no statistics).
std::optional<Fingerprint> read_fingerprint_file(const std::string& path);

}  // namespace ckpt
