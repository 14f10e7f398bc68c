#include "ckpt/verify.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <unordered_map>
#include <system_error>
#include <utility>

#include "ckpt/error.hpp"
#include "commands/verify_detail.hpp"
#include "model/keys.hpp"
#include "ckpt/report.hpp"
#include "stats/prints_by_key.hpp"
#include "stats/torch_backend.hpp"

namespace ckpt {

namespace {

using detail::dist_findings;
using detail::integrity_findings;
using detail::locate_non_finite;
using detail::value_findings;

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
    if (r->format() == Format::torchscript) {
        refuse_damaged_torchscript(*r, path);
        return torchscript_fingerprint(path);  // torch::jit::load is the authority
    }
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

}  // namespace ckpt
