// `scan` of a file, a folder or standard input: the scan room's BlobScanner reads each (scan/), and
// a file that reads as a torch checkpoint gets the weights_only answer.
#include "ckpt/scan.hpp"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>

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

namespace {

// The report of a mapped file, with the weights_only answer where it reads as a torch checkpoint.
ScanReport scan_mapped(const MappedFile& file, const std::string& name, const std::string& open_path, const ScanOptions& options) {
    ScanReport r = scan_bytes(file.view(), name, options);
    if (r.format == "torch-zip" || r.format == "torchscript" || r.format == "legacy") {
        try {  // read as torch.load would read it (its pickle only; nothing is called)
            r.weights_only = weights_only_answers(*Checkpoint::open(open_path));
        } catch (const Error&) {
            // not readable as a checkpoint: no answer (the findings and notes say what is wrong)
        }
    }
    return r;
}

}  // namespace

ScanReport scan_file(const std::string& path, const ScanOptions& options) {
    return naming_file(path, [&] {
        MappedFile file(path);
        return scan_mapped(file, path, path, options);
    });
}

ScanReport scan_stdin(const ScanOptions& options) {
    return naming_file("-", [&] {
        if (::isatty(0))
            throw Error(ErrorKind::usage, "", "standard input is a terminal: pipe a file in (curl -sL URL | ckpt-tool scan -)");
        std::unique_ptr<MappedFile> file = MappedFile::spool(0, "-");
        // The spooled copy has no name; the process's own link to it opens it again.
        return scan_mapped(*file, "-", "/proc/self/fd/" + std::to_string(file->fd()), options);
    });
}

FolderScan scan_folder(const std::string& dir, const ScanOptions& options) {
    namespace fs = std::filesystem;
    FolderScan out;
    std::vector<std::string> files;
    std::error_code ec;
    fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec), end;
    if (ec) throw Error(ErrorKind::io, dir, "cannot list the folder: " + ec.message());
    for (; it != end; it.increment(ec)) {
        if (ec) throw Error(ErrorKind::io, dir, "cannot list the folder: " + ec.message());
        if (it->is_symlink(ec)) continue;
        if (it->is_regular_file(ec)) files.push_back(it->path().string());
    }
    std::sort(files.begin(), files.end());
    for (const std::string& f : files) {
        try {
            out.reports.push_back(scan_file(f, options));
        } catch (const Error& e) {
            // A file that is no format any loader reads (a README, a JSON config) is no finding.
            if (e.kind() == ErrorKind::format) out.skipped.emplace_back(f, e.message());
            else out.errors.emplace_back(f, e.what());
        }
    }
    return out;
}

}  // namespace ckpt
