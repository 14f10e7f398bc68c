// `scan`: the gate before torch.load of a file nobody has vouched for. Default-deny, as
// torch.load(weights_only=True) is: every global a pickle names is judged by GlobalPolicy
// (globals.hpp), and anything not on an allow-list is a finding. Nothing is ever run.
//
// Which pickles: every one any loader a user might hand the file to would unpickle, each file read
// as each loader reads it (lib/src/scan/, docs/hardening.md "How scan reads a file"):
//   - a bare file: every pickle back to back (a second one after STOP, and one after junk bytes),
//     protocols 0-5, with or without PROTO, any first opcode; a legacy torch file's five;
//   - a zip (torch, TorchScript, .npz, .pt2, any other), read twice: as torch's miniz and as Python's
//     zipfile read it (where they part is a finding); every member but a torch storage, as what it
//     is (a pickle by its name or its bytes, an .npy, a zip inside, a compressed stream); TorchScript's
//     code for what runs at load; `_extra_state` tensors' bytes;
//   - .npy (and .npz members) with object arrays, whose data is a pickle (numpy's header parsed as
//     numpy parses it); joblib's inline arrays stepped over as joblib.load does;
//   - a tar as torch.load tries it first (its storages, tensors and pickle), and pickles inside
//     gzip, zlib, bz2, xz, lzma, lz4, zstd and joblib's ZF wrappers;
//   - pickles nested in the scanned ones: bytes values that are pickles, hex or base64 text that
//     decodes to one, and whatever a pickle-loading call (pickle.loads, torch's _load_from_bytes …)
//     is handed, also after a decoding call (base64, binascii, codecs, zlib, bz2, lzma, gzip) the
//     pickle makes itself.
// What is judged: each global (GLOBAL, INST, STACK_GLOBAL, through the memo), dotted names by every
// attribute they walk, names computed at load time, extension codes, calls of computed values,
// BUILD/SETITEM/APPEND on globals and on what functions return, a malformed stream (the unpickler
// runs everything before the fault), a second PROTO, FRAME lengths that disagree with the opcodes
// (then the pickle is also read as the C unpickler reads it from a file), value graphs that expand by
// reference, and files that are two formats at once.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/bytes.hpp"
#include "ckpt/globals.hpp"
#include "ckpt/weights_only.hpp"
#include "ckpt/report.hpp"

namespace ckpt {

struct ScannedGlobal {
    std::string global;  // "module.qualname" as the pickle writes it
    GlobalClass cls = GlobalClass::unknown;
    std::string rule;    // which list or rule decided (GlobalVerdict::rule)
    std::string reason;
    bool weights_only = false;  // torch 2.6's weights_only load allows it
    std::string record;  // the pickle: "archive/data.pkl", "pickle 4 of 5", "… > bytes at 1234"
    uint64_t offset = 0; // file offset of the first opcode naming it (nested: of the bytes holding it)
    std::string opcode;  // GLOBAL, STACK_GLOBAL or INST
    uint64_t count = 0;
};

struct ScanFinding {
    // global, computed_global, computed_call, extension_code, mutates_global, mutates_result,
    // newobj_function, malformed_pickle, misplaced_proto, frame_violation, expansion, polyglot,
    // hidden_entry, zip_confusion, tar_link, opaque_wrapper, torchscript_op, external_file
    std::string kind;
    GlobalClass severity = GlobalClass::dangerous;  // dangerous or unknown
    std::string global;  // the global it names, as written ("" for none)
    std::string record;
    uint64_t offset = 0;
    std::string opcode;  // the opcode at `offset` ("" for none)
    std::string rule;    // for a global: the rule that judged it
    std::string message;
};

// What was seen and is no finding: a pickle that is nested, one that is no pickle at all, bytes that
// follow the last pickle, an encrypted member.
struct ScanNote {
    std::string kind;  // nested_pickle, nested_archive, not_a_pickle, trailing_bytes, parse_error,
                       // flagged_member, wrapper, tar, archive_run, npy_header, torchscript_code,
                       // header_mismatch
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
    std::string file;
    std::string format;  // torch-zip, torchscript, pt2, zip, npz, npy, legacy, pickle, pickle+zip, tar,
                         // safetensors, gzip, zlib, bzip2, xz, lzma, lz4, zstd, joblib-zf, 7z, rar
    std::vector<ScanPickle> pickles;
    std::vector<ScannedGlobal> globals;
    std::vector<ScanFinding> findings;
    std::vector<ScanNote> notes;
    // torch.load(weights_only=True) per torch release, for a file that reads as a torch checkpoint
    // (empty for the rest, and for one that does not read: the findings say why)
    std::vector<WeightsOnlyAnswer> weights_only;
    size_t dangerous() const;
    size_t unknown() const;
    bool clean() const { return findings.empty(); }
};

struct ScanOptions {
    const GlobalPolicy* policy = &GlobalPolicy::standard();
};

// Throws Error for a file that cannot be read at all (missing, empty, not any format scan knows).
ScanReport scan_file(const std::string& path, const ScanOptions& options = {});
// The same on bytes in memory (the fuzzer's entry); `name` stands for the file in the report.
ScanReport scan_bytes(ByteView bytes, const std::string& name, const ScanOptions& options = {});
// `scan -`: what reaches standard input (`curl … | ckpt-tool scan -`), spooled to an unnamed temporary
// file first; the report names it "-".
ScanReport scan_stdin(const ScanOptions& options = {});

// `scan DIR`: every regular file under a folder (a DeepSpeed save, a DCP folder with its .metadata,
// an HF index with its shards, anything else), in name order; symbolic links are not followed.
// A file no loader reads as anything (a README, a JSON config) is skipped, and said.
struct FolderScan {
    std::vector<ScanReport> reports;
    std::vector<std::pair<std::string, std::string>> errors;   // file, message: could not be scanned
    std::vector<std::pair<std::string, std::string>> skipped;  // file, why: no loader reads it
};
FolderScan scan_folder(const std::string& dir, const ScanOptions& options = {});

// `strict` is scan --strict, kept for scripts: its meaning (unknown globals fail) is the default now.
nlohmann::json to_json(const std::vector<ScanReport>& reports, bool strict);
void render_text(const ScanReport& r, std::ostream& out, const TextStyle& style, bool verbose = false);
// `--format github`: one ::error annotation per finding, on `r.file` ("scan: dangerous global",
// "scan: unknown global" …); render_github applies the cap.
std::vector<Annotation> github_annotations(const ScanReport& r);
// `--format sarif`: one SARIF 2.1.0 log, a run of ckpt-tool with a rule per finding kind and a result
// per finding (error for dangerous, warning for unknown), located by file, byte offset and record.
// `errors`: files that could not be scanned, as tool execution notifications.
nlohmann::json to_sarif(const std::vector<ScanReport>& reports, const std::vector<std::pair<std::string, std::string>>& errors);

}  // namespace ckpt
