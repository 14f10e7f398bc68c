// `scan`: what every pickle in a file would make a real unpickler import, classified by allow-list
// first (globals.hpp: safe, benign, unknown, dangerous), without running any of it.
//
// Which pickles: every .pkl record of a zip and any other record that starts like a pickle (storage
// records excepted); the five pickles of the legacy format; a bare pickle file (torch.load runs the
// first pickle of any file that is not a zip); pickles nested in bytes values, to a depth of 4. A
// global is taken where the VM resolves it (GLOBAL, INST, STACK_GLOBAL through the memo), and also by
// a linear disassembly that does not depend on the VM getting that far, so a pickle the VM cannot
// finish still shows every GLOBAL and INST it names. Files that are two formats at once (a zip behind
// a pickle, bytes before the zip's first local header) are findings too.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/globals.hpp"
#include "ckpt/inspect.hpp"
#include "ckpt/report.hpp"

namespace ckpt {

struct ScannedGlobal {
    std::string global;  // "module.name"
    GlobalClass cls = GlobalClass::unknown;
    std::string record;  // the pickle: "archive/data.pkl", "pickle 4 of 5", "… > bytes at 1234"
    uint64_t offset = 0; // file offset of the first opcode naming it (nested: of the bytes holding it)
    uint64_t count = 0;
};

struct ScanFinding {
    std::string kind;      // "global", "computed_global", "extension_code", "unreadable_pickle", "polyglot"
    GlobalClass severity;  // dangerous or unknown
    std::string global;    // for "global": module.name
    std::string record;
    uint64_t offset = 0;
    std::string message;
};

struct ScanPickle {
    std::string record;
    uint64_t offset = 0, size = 0;
    uint8_t protocol = 0;
};

struct ScanReport {
    std::string file, format;  // "torch-zip", "torchscript", "legacy", "pickle", "safetensors", "zip"
    std::vector<ScanPickle> pickles;
    std::vector<ScannedGlobal> globals;
    std::vector<ScanFinding> findings;
    size_t dangerous() const;
    size_t unknown() const;
};

// Throws Error for a file that cannot be read at all (missing, empty, not any format scan knows).
ScanReport scan_file(const std::string& path);

nlohmann::json to_json(const std::vector<ScanReport>& reports, bool strict);
void render_text(const ScanReport& r, std::ostream& out, const TextStyle& style);
// `--format github`: one annotation per finding, on `r.file`: ::error for a dangerous one, and for an
// unknown one with `strict` (both make exit 1), ::warning for an unknown one without it ("scan:
// dangerous global", "scan: unknown polyglot" …); render_github applies the cap.
std::vector<Annotation> github_annotations(const ScanReport& r, bool strict);

}  // namespace ckpt
