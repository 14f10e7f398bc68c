#include "ckpt/fingerprint.hpp"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

// xxh3_avx2.cpp: the same XXH3, compiled for AVX2.
extern "C" XXH_errorcode ckpt_avx2_XXH3_128bits_update(XXH3_state_t* state, const void* input, size_t len);

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/error.hpp"
#include "io/zip.hpp"
#include "stats/decode.hpp"
#include "stats/tensor_stats.hpp"

namespace ckpt {

namespace {

using detail::Decoder;
using detail::decoder_for;

constexpr double k_inf = std::numeric_limits<double>::infinity();
constexpr size_t k_chunk = 1024;  // elements decoded at a time: the 8 KiB double buffer stays in L1

typedef double v4d __attribute__((vector_size(32)));
typedef int64_t v4i __attribute__((vector_size(32)));

// ---- accumulating ----

struct Lanes {
    double* s1;  // four lanes each: sum of x - k, of (x - k)², of |x|
    double* s2;
    double* sa;
    double lo, hi;
    bool special;  // a NaN or an Inf was seen
};

// The hot loop of verify, written with vector types so that it runs four doubles at a time (AVX2
// where the CPU has it, two SSE2 halves otherwise): ~0.5 ns per element instead of ~10 for the
// scalar loop the compiler made of the same arithmetic. Lane order is fixed, so results are
// deterministic. NaN and Inf are only flagged here (one compare per vector); the rare chunk that
// holds one is counted again by the caller.
__attribute__((target_clones("avx2", "default")))
void accumulate(const double* x, size_t m, double k, Lanes& out) {
    v4d a1, a2, aa;
    std::memcpy(&a1, out.s1, sizeof a1);
    std::memcpy(&a2, out.s2, sizeof a2);
    std::memcpy(&aa, out.sa, sizeof aa);
    const v4d kv = {k, k, k, k};
    const double big = std::numeric_limits<double>::max();
    const v4d maxv = {big, big, big, big};
    const v4i abs_mask = {INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX};
    v4d lo = {out.lo, out.lo, out.lo, out.lo}, hi = {out.hi, out.hi, out.hi, out.hi};
    v4i finite = {-1, -1, -1, -1};
    // Two independent sets of accumulators, so consecutive additions do not wait on each other's
    // latency; folded together below in a fixed order.
    v4d b1 = {}, b2 = {}, ba = {};
    auto step = [&](v4d v, v4d& s1, v4d& s2, v4d& sa) {
        v4d d = v - kv;
        v4d av = reinterpret_cast<v4d>(reinterpret_cast<v4i>(v) & abs_mask);
        s1 += d;
        s2 += d * d;
        sa += av;
        finite &= av <= maxv;   // false for NaN and ±Inf
        lo = v < lo ? v : lo;   // NaN compares false: skipped here, propagated at the end
        hi = v > hi ? v : hi;
    };
    size_t i = 0;
    for (; i + 8 <= m; i += 8) {
        v4d v, w;
        std::memcpy(&v, x + i, sizeof v);
        std::memcpy(&w, x + i + 4, sizeof w);
        step(v, a1, a2, aa);
        step(w, b1, b2, ba);
    }
    a1 += b1;
    a2 += b2;
    aa += ba;
    for (; i + 4 <= m; i += 4) {
        v4d v;
        std::memcpy(&v, x + i, sizeof v);
        step(v, a1, a2, aa);
    }
    for (; i < m; ++i) {
        double v = x[i], d = v - k;
        a1[0] += d;
        a2[0] += d * d;
        aa[0] += std::fabs(v);
        finite[0] &= std::fabs(v) <= big ? -1 : 0;
        lo[0] = v < lo[0] ? v : lo[0];
        hi[0] = v > hi[0] ? v : hi[0];
    }
    std::memcpy(out.s1, &a1, sizeof a1);
    std::memcpy(out.s2, &a2, sizeof a2);
    std::memcpy(out.sa, &aa, sizeof aa);
    for (int l = 0; l < 4; ++l) {
        out.lo = lo[l] < out.lo ? lo[l] : out.lo;
        out.hi = hi[l] > out.hi ? hi[l] : out.hi;
        out.special = out.special || finite[l] == 0;
    }
}

// Sums in four lanes (so the additions do not wait on each other), each of x - k for a shift k near
// the mean: the variance then comes from one pass without the cancellation of sum(x²) - n·mean².
struct Accumulator {
    bool shifted = false;
    double k = 0;
    uint64_t n = 0, nan = 0, inf = 0;
    double s1[4] = {}, s2[4] = {}, sa[4] = {};
    double mn = k_inf, mx = -k_inf;

    void add(const double* x, size_t m) {
        if (!shifted) {
            // The shift k: the first chunk's mean when the data sit far from zero (running_var near
            // 1 with a tiny spread: without it the variance would cancel), 0 when the mean is small
            // against the spread (weights around 0: with it, mean = k + sum/n would cancel instead;
            // measured 1e-8 relative on means near 1e-6).
            double sum = 0, sq = 0;
            size_t finite = 0;
            for (size_t i = 0; i < m; ++i)
                if (std::isfinite(x[i])) {
                    sum += x[i];
                    ++finite;
                }
            double m0 = finite ? sum / static_cast<double>(finite) : 0;
            for (size_t i = 0; i < m; ++i)
                if (std::isfinite(x[i])) sq += (x[i] - m0) * (x[i] - m0);
            double spread = finite > 1 ? std::sqrt(sq / static_cast<double>(finite - 1)) : 0;
            k = std::fabs(m0) > spread ? m0 : 0;
            shifted = true;
        }
        Lanes l{s1, s2, sa, mn, mx, false};
        accumulate(x, m, k, l);
        mn = l.lo;
        mx = l.hi;
        if (l.special)
            for (size_t i = 0; i < m; ++i) {
                nan += std::isnan(x[i]);
                inf += std::isinf(x[i]);
            }
        n += m;
    }

    void finish(TensorStats& s) const {
        s.count = n;
        s.nan = nan;
        s.inf = inf;
        if (n == 0) return;
        auto total = [](const double (&a)[4]) { return (a[0] + a[1]) + (a[2] + a[3]); };
        double dn = static_cast<double>(n), t1 = total(s1), t2 = total(s2);
        s.mean = k + t1 / dn;
        s.abs_mean = total(sa) / dn;
        // sum x² = sum (x-k)² + 2k·sum (x-k) + n·k²: with k near the mean, the middle term is small
        // and the others are sums of squares, so nothing cancels.
        s.l2 = std::isinf(t2) ? k_inf : std::sqrt(t2 + 2 * k * t1 + dn * k * k);  // an Inf makes it Inf
        if (n > 1) {
            double var = (t2 - t1 * t1 / dn) / (dn - 1);
            s.std = std::sqrt(var < 0 ? 0 : var);
            if (std::isnan(var)) s.std = var;
        }
        double q = std::numeric_limits<double>::quiet_NaN();
        s.min = nan ? q : mn;
        s.max = nan ? q : mx;
    }
};

// One XXH3-128 state in place (no allocation a tensor), fed by the AVX2 build when the CPU has it.
struct Hasher {
    XXH3_state_t state;
    Hasher() {
        XXH3_INITSTATE(&state);
        XXH3_128bits_reset(&state);
    }
    Hasher(const Hasher&) = delete;
    Hasher& operator=(const Hasher&) = delete;
    void update(const uint8_t* p, size_t n) {
        static const bool avx2 = __builtin_cpu_supports("avx2");
        if (avx2) ckpt_avx2_XXH3_128bits_update(&state, p, n);
        else XXH3_128bits_update(&state, p, n);
    }
    ContentHash digest() const {
        XXH128_canonical_t c;
        XXH128_canonicalFromHash(&c, XXH3_128bits_digest(&state));
        return ContentHash(c.digest);
    }
};

// Calls f(first element, count, step) for runs that cover the tensor in row-major order: size-1
// dimensions dropped and dimensions that are contiguous with each other merged first, so a
// contiguous tensor is one run and a transposed matrix one run per row.
template <class F>
void for_each_run(const TensorInfo& t, F&& f) {
    if (t.numel == 0) return;
    std::vector<int64_t> shape, stride;
    for (size_t d = 0; d < t.shape.size(); ++d) {
        if (t.shape[d] == 1) continue;
        if (!shape.empty() && stride.back() == t.stride[d] * t.shape[d]) {
            shape.back() *= t.shape[d];
            stride.back() = t.stride[d];
        } else {
            shape.push_back(t.shape[d]);
            stride.push_back(t.stride[d]);
        }
    }
    if (shape.empty()) return f(t.storage_offset, int64_t{1}, int64_t{1});
    size_t outer = shape.size() - 1;
    std::vector<int64_t> idx(outer, 0);
    while (true) {
        int64_t at = t.storage_offset;
        for (size_t d = 0; d < outer; ++d) at += idx[d] * stride[d];
        f(at, shape.back(), stride.back());
        size_t d = outer;
        while (d > 0 && ++idx[d - 1] == shape[d - 1]) idx[--d] = 0;
        if (d == 0) return;
    }
}

// Hands `consume(p, n)` the elements in row-major order, at most k_chunk at a time: contiguous
// runs as pointers into `base`, strided ones gathered into a buffer first.
template <class Consume>
void for_each_chunk(const TensorInfo& t, const uint8_t* base, size_t esz, Consume&& consume) {
    std::vector<uint8_t> gathered;
    for_each_run(t, [&](int64_t first, int64_t n, int64_t step) {
        for (int64_t done = 0; done < n;) {
            size_t m = static_cast<size_t>(std::min<int64_t>(n - done, static_cast<int64_t>(k_chunk)));
            const uint8_t* p = base + static_cast<uint64_t>(first + done * step) * esz;
            if (step == 1) {
                consume(p, m);
            } else {
                gathered.resize(m * esz);
                for (size_t i = 0; i < m; ++i) std::memcpy(&gathered[i * esz], p + i * static_cast<uint64_t>(step) * esz, esz);
                consume(gathered.data(), m);
            }
            done += static_cast<int64_t>(m);
        }
    });
}

template <class Consume>
void consume_contiguous(const uint8_t* p, uint64_t count, size_t esz, Consume&& consume) {
    for (uint64_t done = 0; done < count;) {
        size_t m = static_cast<size_t>(std::min<uint64_t>(count - done, k_chunk));
        consume(p + done * esz, m);
        done += m;
    }
}

// One pass over elements handed over in pieces: CRC-32, content hash and (unless hash_only) the
// statistics, each piece while it is in L1.
class OnePass {
public:
    OnePass(DType dtype, uint32_t* crc, bool hash_only)
        : m_decode(hash_only ? nullptr : decoder_for(dtype)), m_esz(static_cast<size_t>(dtype_size(dtype))), m_crc(crc),
          m_numbers(m_decode ? 2 * k_chunk : 0) {}
    size_t element_size() const { return m_esz; }
    void operator()(const uint8_t* p, size_t n) {
        if (m_crc) *m_crc = crc32_of({p, n * m_esz}, *m_crc);
        m_hash.update(p, n * m_esz);
        if (m_decode) m_acc.add(m_numbers.data(), m_decode(p, n, m_numbers.data()));
    }
    TensorStats finish() {
        TensorStats s;
        if (m_decode) m_acc.finish(s);
        s.hash = m_hash.digest();
        return s;
    }

private:
    Decoder m_decode;
    size_t m_esz;
    uint32_t* m_crc;
    Accumulator m_acc;
    Hasher m_hash;
    std::vector<double> m_numbers;
};

}  // namespace

namespace detail {

// A view that makes far more elements than it spans (view_within_bounds): torch's expand repeats
// each element of the unrepeated tensor R times, so its statistics are those elements' own with
// the counts and sums scaled by R — the same numbers, in work bounded by what the file stores. Its
// hash is of the elements once, with R, the shape and which dimensions repeat (it differs from the
// hash of the same values written out in full). Any other overlap is refused.
TensorStats repeated_stats(DType dtype, const uint8_t* base, const TensorInfo& view, bool hash_only) {
    TensorInfo once = view.unrepeated();
    if (!view_within_bounds(once))
        throw Error(ErrorKind::limit, "",
                    "a tensor of shape " + shape_text(view.shape) + " views " + std::to_string(view.extent) +
                        " stored elements as " + std::to_string(view.numel) +
                        " through overlapping strides: not read element by element");
    TensorStats s = stats_over(dtype, base, &once, once.numel, nullptr, hash_only, {});
    uint64_t r = view.repeats();
    double dr = static_cast<double>(r);
    if (!hash_only) {
        uint64_t n = s.count;
        s.count = n * r;
        s.nan *= r;
        s.inf *= r;
        if (s.l2) s.l2 = *s.l2 * std::sqrt(dr);
        // The sum of squared deviations grows R times; the unbiased variance divides by nR - 1.
        if (s.count > 1 && !(s.std && std::isnan(*s.std))) {
            if (s.mean && !std::isfinite(*s.mean)) {
                s.std = std::numeric_limits<double>::quiet_NaN();
            } else {
                double ssd = n > 1 && s.std ? *s.std * *s.std * static_cast<double>(n - 1) : 0.0;
                s.std = std::sqrt(ssd * dr / (static_cast<double>(s.count) - 1));
            }
        }
    }
    Hasher h;
    const char tag[] = "ckpt-tool repeated view";
    h.update(reinterpret_cast<const uint8_t*>(tag), sizeof tag);
    h.update(reinterpret_cast<const uint8_t*>(&r), sizeof r);
    for (size_t d = 0; d < view.shape.size(); ++d) {  // each dimension's size, and whether it repeats
        int64_t size = view.shape[d], repeats = view.stride[d] == 0 ? 1 : 0;
        h.update(reinterpret_cast<const uint8_t*>(&size), sizeof size);
        h.update(reinterpret_cast<const uint8_t*>(&repeats), sizeof repeats);
    }
    std::string once_hash = s.hash.text();
    h.update(reinterpret_cast<const uint8_t*>(once_hash.data()), once_hash.size());
    s.hash = h.digest();
    return s;
}

// `crc`, when given: the tensor is the whole record, contiguous, and the record's CRC-32 is taken in
// the same pass, chunk by chunk while each is in L1 (one read of the bytes from memory, not two).
TensorStats stats_over(DType dtype, const uint8_t* base, const TensorInfo* view, uint64_t count,
                       uint32_t* crc, bool hash_only, const std::function<void(ByteView)>& release) {
    if (view && !view_within_bounds(*view)) return repeated_stats(dtype, base, *view, hash_only);
    OnePass pass(dtype, crc, hash_only);
    size_t esz = pass.element_size();
    constexpr uint64_t k_window = 64ull << 20;
    bool windows = release && (!view || view->contiguous());  // a contiguous read only moves forward
    const uint8_t* unreleased = nullptr;
    auto consume = [&](const uint8_t* p, size_t n) {
        pass(p, n);
        if (windows) {
            const uint8_t* end = p + n * esz;
            if (!unreleased) unreleased = p;
            if (static_cast<uint64_t>(end - unreleased) >= k_window) {
                release({unreleased, static_cast<uint64_t>(end - unreleased)});
                unreleased = end;
            }
        }
    };
    if (view) for_each_chunk(*view, base, esz, consume);
    else consume_contiguous(base, count, esz, consume);
    return pass.finish();
}

struct StatsStream::Impl {
    Impl(DType dtype, uint32_t* crc, bool hash_only) : pass(dtype, crc, hash_only) {}
    OnePass pass;
    std::vector<uint8_t> carry;  // the start of an element the last part cut
};

StatsStream::StatsStream(DType dtype, uint32_t* crc, bool hash_only) : m(std::make_unique<Impl>(dtype, crc, hash_only)) {}
StatsStream::~StatsStream() = default;

void StatsStream::add(ByteView part) {
    size_t esz = m->pass.element_size();
    const uint8_t* p = part.data;
    uint64_t left = part.size;
    if (!m->carry.empty()) {
        size_t take = static_cast<size_t>(std::min<uint64_t>(esz - m->carry.size(), left));
        m->carry.insert(m->carry.end(), p, p + take);
        p += take;
        left -= take;
        if (m->carry.size() < esz) return;
        m->pass(m->carry.data(), 1);
        m->carry.clear();
    }
    consume_contiguous(p, left / esz, esz, m->pass);
    m->carry.assign(p + left / esz * esz, p + left);
}

TensorStats StatsStream::finish() {
    if (!m->carry.empty()) throw Error(ErrorKind::corrupt, "", "a tensor's bytes end inside an element");
    return m->pass.finish();
}

TensorStats stats_of_file_range(DType dtype, int fd, uint64_t offset, uint64_t count, uint32_t* crc, bool hash_only,
                                std::vector<uint8_t>& buffer, const std::string& path) {
    OnePass pass(dtype, crc, hash_only);
    size_t esz = pass.element_size();
    size_t cap = buffer.size() / esz * esz;
    if (cap == 0) throw Error(ErrorKind::usage, path, "internal: read buffer smaller than one element");
    for (uint64_t left = count * esz; left > 0;) {
        size_t want = static_cast<size_t>(std::min<uint64_t>(left, cap)), got = 0;
        while (got < want) {
            ssize_t n = ::pread(fd, buffer.data() + got, want - got, static_cast<off_t>(offset + got));
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) throw Error(ErrorKind::io, path, std::string("read failed: ") + std::strerror(errno), offset + got);
            if (n == 0) throw Error(ErrorKind::corrupt, path, "file ends inside a tensor (truncated?)", offset + got);
            got += static_cast<size_t>(n);
        }
        consume_contiguous(buffer.data(), want / esz, esz, pass);
        offset += want;
        left -= want;
    }
    return pass.finish();
}

}  // namespace detail

using detail::stats_over;

TensorStats tensor_stats(const TensorInfo& t, ByteView storage) {
    uint64_t esz = dtype_size(t.dtype);
    uint64_t capacity = storage.size / esz;
    if (t.numel > 0 && static_cast<uint64_t>(t.storage_offset) + t.extent > capacity)
        throw Error(ErrorKind::corrupt, "", "tensor runs past the end of its storage");
    return stats_over(t.dtype, storage.data, &t, t.numel, nullptr, false);
}

void for_each_logical_bytes(const TensorInfo& t, ByteView storage,
                            const std::function<void(const uint8_t*, size_t)>& sink) {
    uint64_t esz = dtype_size(t.dtype);
    if (t.numel > 0 && static_cast<uint64_t>(t.storage_offset) + t.extent > storage.size / esz)
        throw Error(ErrorKind::corrupt, "", "tensor runs past the end of its storage");
    if (t.contiguous()) {  // in one piece: a writer's sink is a write(2) each (4 KiB pieces: 262,144 for 1 GiB)
        if (t.numel) sink(storage.data + static_cast<uint64_t>(t.storage_offset) * esz, t.numel * esz);
        return;
    }
    for_each_chunk(t, storage.data, static_cast<size_t>(esz), [&](const uint8_t* p, size_t n) { sink(p, n * esz); });
}

TensorStats detail::combine_stats(const std::vector<const TensorStats*>& values, uint64_t zeros,
                          const std::vector<const TensorStats*>& hashed) {
    TensorStats s;
    double sum = 0, sumsq = 0, abs_sum = 0, mn = k_inf, mx = -k_inf;
    bool numbers = true;
    for (const TensorStats* v : values) {
        s.count += v->count;
        s.nan += v->nan;
        s.inf += v->inf;
        if (v->count == 0) continue;
        if (!v->mean || !v->abs_mean || !v->l2 || !v->min || !v->max) {
            numbers = false;
            continue;
        }
        double n = static_cast<double>(v->count);
        sum += *v->mean * n;
        abs_sum += *v->abs_mean * n;
        sumsq += *v->l2 * *v->l2;
        mn = std::isnan(*v->min) || std::isnan(mn) ? *v->min : std::min(mn, *v->min);
        mx = std::isnan(*v->max) || std::isnan(mx) ? *v->max : std::max(mx, *v->max);
    }
    if (zeros) {
        s.count += zeros;
        if (!std::isnan(mn)) mn = std::min(mn, 0.0);
        if (!std::isnan(mx)) mx = std::max(mx, 0.0);
    }
    if (numbers && s.count) {
        double n = static_cast<double>(s.count);
        s.mean = sum / n;
        s.abs_mean = abs_sum / n;
        s.l2 = std::sqrt(sumsq);
        if (s.count > 1) {
            double var = (sumsq - sum * sum / n) / (n - 1);
            s.std = std::isnan(var) ? var : std::sqrt(var < 0 ? 0 : var);
        }
        s.min = mn;
        s.max = mx;
    }
    Hasher h;
    for (const TensorStats* p : hashed) {  // the hash of the parts' hashes as text
        std::string text = p->hash.text();
        h.update(reinterpret_cast<const uint8_t*>(text.data()), text.size());
    }
    s.hash = h.digest();
    return s;
}

TensorStats buffer_stats(DType dtype, ByteView bytes, uint64_t count) {
    if (count * dtype_size(dtype) > bytes.size) throw Error(ErrorKind::corrupt, "", "buffer shorter than its elements");
    return stats_over(dtype, bytes.data, nullptr, count, nullptr, false);
}

namespace {
constexpr std::string_view k_hash_tag = "xxh3-128:";
}

std::string ContentHash::text() const {
    if (!m_set) return {};
    static const char* digits = "0123456789abcdef";
    std::string out;
    out.reserve(k_hash_tag.size() + 32);
    out.append(k_hash_tag);
    for (unsigned char b : m_bytes) {
        out += digits[b >> 4];
        out += digits[b & 15];
    }
    return out;
}

std::optional<ContentHash> ContentHash::parse(std::string_view text) {
    if (text.size() != k_hash_tag.size() + 32 || text.substr(0, k_hash_tag.size()) != k_hash_tag) return std::nullopt;
    auto nibble = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
    };
    unsigned char bytes[16];
    for (size_t i = 0; i < 16; ++i) {
        int hi = nibble(text[k_hash_tag.size() + 2 * i]), lo = nibble(text[k_hash_tag.size() + 2 * i + 1]);
        if (hi < 0 || lo < 0) return std::nullopt;
        bytes[i] = static_cast<unsigned char>(hi << 4 | lo);
    }
    return ContentHash(bytes);
}

}  // namespace ckpt
