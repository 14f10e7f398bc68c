// `scan` at the level of a file: which pickles it holds and where (pickle_scan.cpp judges each).
#include "ckpt/scan.hpp"

#include "base/text_util.hpp"

#include <algorithm>
#include <optional>

#include "ckpt/bytes.hpp"
#include "ckpt/checkpoint.hpp"
#include "ckpt/error.hpp"
#include "io/mapped_file.hpp"
#include "scan/blob_scan.hpp"

namespace ckpt {

size_t ScanReport::dangerous() const {
    return static_cast<size_t>(std::count_if(findings.begin(), findings.end(),
                                             [](const ScanFinding& f) { return f.severity == GlobalClass::dangerous; }));
}
size_t ScanReport::unknown() const { return findings.size() - dangerous(); }

ScanReport scan_bytes(ByteView f, const std::string& name, const ScanOptions& options) {
    ScanReport r;
    r.file = name;
    BlobScanner(r, *options.policy).scan_file(f);
    return r;
}

ScanReport scan_file(const std::string& path, const ScanOptions& options) {
    return naming_file(path, [&] {
        MappedFile file(path);
        ScanReport r = scan_bytes(file.view(), path, options);
        if (r.format == "torch-zip" || r.format == "torchscript" || r.format == "legacy") {
            try {  // read as torch.load would read it (its pickle only; nothing is called)
                r.weights_only = weights_only_answers(*Checkpoint::open(path));
            } catch (const Error&) {
                // not readable as a checkpoint: no answer (the findings and notes say what is wrong)
            }
        }
        return r;
    });
}

}  // namespace ckpt
