// A run of bytes — a file, a zip member, bytes a pickle holds, what a gzip holds — read the way each
// loader a user might hand it to reads it, and every pickle any of them would unpickle judged:
//
//   starts with     torch.load / jit.load        numpy.load               pickle.load, joblib.load
//   PK\3\4          zip (miniz)                  .npz (zipfile)           —
//   PK\5\6          —                            .npz (zipfile)           —
//   \x93NUMPY       —                            .npy                     —
//   anything else   tar, else pickles from 0     pickle from 0            pickle from 0 (joblib: after
//                                                                         its compressor, by magic)
// Besides: torch.export.load and every Python scanner read a zip by its end (zipfile), wherever it
// starts; safetensors loaders read a header. Where two of these readings both hold something
// (a pickle that imports, a tar, a zip, a safetensors header), the file is a polyglot, and that is a
// finding; where two zip readers part (zip_readings.hpp), that is one too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/bytes.hpp"
#include "ckpt/scan.hpp"
#include "scan/pickle_scan.hpp"

namespace ckpt {

struct ZipReading;

// A tensor whose bytes are a pickle: TransformerEngine's `*._extra_state` (uint8, pickle.dumps of its
// FP8 state; Megatron and NeMo checkpoints carry one per layer), which set_extra_state unpickles.
struct ExtraState {
    std::string key;      // the dict key
    std::string storage;  // the storage's key (its record is ROOT/data/KEY)
    uint64_t offset = 0, size = 0;  // its bytes within the record
};

class BlobScanner {
public:
    BlobScanner(ScanReport& report, const GlobalPolicy& policy);
    BlobScanner(const BlobScanner&) = delete;
    BlobScanner& operator=(const BlobScanner&) = delete;

    // A whole file. Throws Error(format) when no loader reads it as anything (no zip, no pickle …).
    void scan_file(ByteView file);
    // Bytes inside it: `offset` is where they (or what holds them) are in the file, `name` says
    // which bytes they are; `surely`: a loader is handed them, so a broken pickle there is a finding.
    void scan(ByteView bytes, uint64_t offset, const std::string& name, bool surely, int depth);

private:
    struct Where {
        uint64_t base;      // file offset of the bytes' start; for bytes not in the file, of what holds them
        bool in_file;       // the bytes are the file's own (offsets inside them are file offsets)
        std::string name;
        int depth;
    };
    // What a reading found: whether it holds something a loader acts on, for the polyglot test.
    struct Readings {
        std::vector<std::string> real;  // "a pickle that imports (pickle.load, torch.load)", "a tar (torch.load)" …
        std::string format;             // the first reading's format name
    };

    void dispatch(ByteView b, const Where& w, bool surely, bool top);
    void scan_zip(ByteView b, const Where& w, bool torch_takes_it, bool top);
    bool scan_archive_run(ByteView b, const Where& w);
    void scan_npy(ByteView b, const Where& w, bool surely);
    void scan_other(ByteView b, const Where& w, bool surely, bool top);
    void scan_wrapper(ByteView b, const Where& w, Readings& r);
    bool scan_tar(ByteView b, const Where& w);
    bool tar_last_member_is_the_zip(ByteView b, const Where& w);
    // Every GLOBAL opcode whose module line is one Python can import, in bytes a reader may run as
    // pickles from places scan cannot pin down (a tar member whose layout scan cannot follow).
    void scan_global_lines(ByteView data, const Where& w);
    PickleScanner::Result scan_pickles(ByteView b, const Where& w, bool tentative, size_t max_pickles,
                                       const PickleScanner::RootVisitor& first_root = {});
    void scan_extra_states(ByteView b, const ZipReading& t, const std::string& root,
                           const std::vector<ExtraState>& extras, const Where& w);
    // A zip or tar member, or decompressed bytes: what it starts with decides how it is read.
    void scan_member(ByteView bytes, const Where& w, bool sure_pickle);
    void finding(std::string kind, GlobalClass severity, const Where& w, uint64_t offset, std::string message);

    ScanReport& m_r;
    PickleScanner m_pickles;
    uint64_t m_inflate_budget;  // bytes all decompression of one file may produce together
};

// The largest depth of archives and pickles inside one another that is opened.
constexpr int k_max_scan_depth = 6;

}  // namespace ckpt
