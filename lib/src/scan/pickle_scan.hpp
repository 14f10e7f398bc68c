// One pickle, scanned: the restricted VM runs it with hooks that record what a real unpickler would
// import and call, a disassembly checks its structure (PROTO, FRAME, DUP) and what lies past a fault,
// and pickles nested in it are scanned in turn. scan.cpp finds the pickles of a file; this judges each.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <tuple>

#include "ckpt/bytes.hpp"
#include "ckpt/scan.hpp"
#include "ckpt/value.hpp"

namespace ckpt {

class PickleScanner {
public:
    PickleScanner(ScanReport& report, const GlobalPolicy& policy) : m_r(report), m_policy(policy) {}

    struct Result {
        uint64_t end = 0;           // bytes up to and including STOP; 0 when it did not reach one
        bool not_a_pickle = false;  // its very first opcode could not be read
        uint64_t fault = 0;         // where it broke, from the start of the data (end == 0)
        uint64_t imports = 0;       // globals it names and names it computes: what makes running it matter
    };
    // Bytes a pickle hands to a loader (torch.load, pickle.loads …) or that hold an archive: scanned
    // as a file of their own (a zip, a legacy stream, a pickle) by whoever set this (BlobScanner).
    // `surely`: a loader is handed them.
    using BlobScan = std::function<void(ByteView bytes, uint64_t offset, const std::string& record, bool surely, int depth)>;
    void set_blob_scan(BlobScan f) { m_blob = std::move(f); }
    // Called with the value a pickle built, when it reached its STOP, before that value is freed.
    using RootVisitor = std::function<void(const Value* root)>;
    // Scans the pickle at the start of `data`, which sits at file offset `base`, named `record`.
    // `tentative`: the bytes are only thought to be a pickle (a member not named .pkl, bytes after
    // junk, a file without PROTO), so a fault in them is a note, not a finding; what they import is
    // judged all the same.
    Result scan(ByteView data, uint64_t base, const std::string& record, bool tentative = false,
                const RootVisitor& on_root = {}, int depth = 0);

    void finding(ScanFinding f) { m_r.findings.push_back(std::move(f)); }
    void note(const std::string& kind, const std::string& record, uint64_t offset, const std::string& message) {
        m_r.notes.push_back({kind, record, offset, message});
    }

private:
    Result scan_nested(ByteView data, uint64_t base, const std::string& record, bool tentative, int depth,
                       const RootVisitor& on_root = {});
    ScanReport& m_r;
    const GlobalPolicy& m_policy;
    std::set<std::tuple<std::string, uint64_t, uint64_t>> m_nested_seen;  // (pickle, offset, size) scanned
    BlobScan m_blob;
    bool m_plain = false;  // reading a joblib pickle again as pickle.load reads it
};

}  // namespace ckpt
