// `verify`: is this checkpoint intact, and are its numbers what they should be?
//
// Integrity (always): the CRC-32 of every record, every storage record present and long enough for
// every tensor viewing it, records under data/ that no storage names, NaN and Inf per tensor, globals
// off the allow-list, and an optimizer state that does not fit the model's parameters.
// Drift (with a reference: a fingerprint JSON, another checkpoint, or a TorchScript model read
// through the LibTorch backend): per tensor, every statistic
// within atol + rtol·|reference|, or with `exact` the content hashes equal; missing, extra and
// re-shaped tensors are findings too.
#pragma once

#include <exception>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.hpp"
#include "ckpt/globals.hpp"
#include "ckpt/fingerprint.hpp"
#include "ckpt/report.hpp"

namespace ckpt {

struct VerifyOptions {
    std::optional<std::string> reference;  // a fingerprint JSON or a checkpoint
    OpenOptions reference_open;
    // Defaults: an exact copy passes (equal bytes give equal numbers), one element of a 1,000-element
    // layer moved by 1e-3 fails (its mean moves by 1e-6, far past 1e-9 + 1e-6·|mean|).
    double rtol = 1e-6;
    double atol = 1e-9;
    bool exact = false;
    bool all = false;
    std::vector<std::string> key_globs;
    std::vector<std::string> ignore_globs;  // --ignore: tensors left out on both sides (BN's num_batches_tracked …)
    unsigned threads = 0;
    std::function<void(uint64_t, uint64_t)> progress;
    const GlobalPolicy* policy = &GlobalPolicy::standard();  // how globals are judged (--allow)
    // Keep a row per tensor (VerifyReport::tensors: the JSON report's rows). Without a reference, a
    // report that prints none (text, --format github) need not: each tensor's NaN/Inf findings are
    // taken as it is read, and it is counted (100,000 rows were 25 MiB).
    bool rows = true;
};

struct Finding {
    std::string kind;  // crc_mismatch, mixed_saves, record_frame, missing_record, record_size, out_of_bounds, storage_conflict,
                       // unreferenced_record, nan, inf, unsafe_global, optimizer_mismatch,
                       // missing, extra, changed, drift
    std::string key;   // the tensor, record or global it concerns
    std::string message;
    double relative_change = 0;  // drift: the largest |a - r| / |r| over the statistics
};

struct TensorVerdict {
    TensorPrint print;
    // The reference's statistics (null without a reference, or for an extra tensor): a pointer, as an
    // inline optional made every verdict 260 bytes larger, with a reference or without one.
    std::shared_ptr<const TensorStats> reference;
    std::string_view status;      // "" without a reference; "ok", "drift", "changed", "extra", "missing" (static text)
    std::string_view worst_stat;  // drift: the statistic that moved most (static text)
    double relative_change = 0;
};

struct VerifyReport {
    std::string file;
    std::optional<std::string> reference;
    VerifyOptions options;
    std::vector<Finding> findings;       // integrity first, then drift worst first
    // What is worth knowing and is no finding (no exit 1): tensors compared after a change of dtype,
    // tensors within the tolerance whose bytes differ. One line each, said once.
    std::vector<std::string> notes;
    std::vector<TensorVerdict> tensors;  // file order; missing ones (reference only) at the end; empty unless options.rows
    size_t tensors_read = 0;             // of this file (rows kept or not)
    size_t records_checked = 0;
    size_t records_without_crc = 0;  // zip records whose CRC-32 is 0: written without one (torch 2.x)
    uint64_t bytes_read = 0;
    bool ok() const { return findings.empty(); }
};

// A reference fingerprint file read ahead on another thread while the checkpoint opens (its rows take
// about as long to parse as the checkpoint's pickle): made before Checkpoint::open and handed to
// verify. A reference that is no fingerprint file (a checkpoint) is read by verify, as without it.
class ReferenceAhead {
public:
    explicit ReferenceAhead(const VerifyOptions& options);
    ReferenceAhead(const ReferenceAhead&) = delete;
    ReferenceAhead& operator=(const ReferenceAhead&) = delete;
    ~ReferenceAhead();
    // What read_fingerprint_file gives for the reference (nullopt: no fingerprint file), or its
    // error, thrown here as it would have been without reading ahead.
    std::optional<Fingerprint> take();

private:
    std::string m_path;
    bool m_read = false;  // a fingerprint file may be there: read it (on m_thread, or in take())
    std::thread m_thread;
    std::optional<Fingerprint> m_result;
    std::exception_ptr m_error;
};

// Throws Error for what cannot be read (either file); everything else is a finding. `ahead`, when
// given, is the reference read ahead (options.reference's).
VerifyReport verify(const Checkpoint& c, const VerifyOptions& options, Fingerprint* fingerprint_out = nullptr,
                    ReferenceAhead* ahead = nullptr);

// The optimizer check on its own (verify runs it): for every optimizer state_dict in the file, its
// parameters in param_groups order are matched with the state dict's parameters in order (every
// floating-point tensor except BatchNorm's running_mean / running_var), and each state tensor that
// is not a scalar (exp_avg, exp_avg_sq, momentum_buffer …) must have its parameter's shape.
std::vector<Finding> check_optimizers(const Checkpoint& c);

nlohmann::json to_json(const VerifyReport& r);
// The same text as to_json(r).dump(2) and a newline, a row at a time through `sink`.
void write_json(const VerifyReport& r, const std::function<void(std::string_view)>& sink);
void render_text(const VerifyReport& r, std::ostream& out, const TextStyle& style);
// `--format github`: one ::error per finding (every finding makes exit 1), on `r.file`, in the
// report's order (integrity first, then drift worst first); render_github applies the cap.
std::vector<Annotation> github_annotations(const VerifyReport& r);

}  // namespace ckpt
