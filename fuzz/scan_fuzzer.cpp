// `scan` on any bytes, as `ckpt-tool scan FILE` runs it: scan_bytes (format sniffing, every member of
// a zip read tolerantly, stacked pickles and those after junk, .npy object arrays, nested and decoded
// pickles, the FRAME re-read as the C unpickler reads a file), judged by a policy with allow rules,
// then rendered as text, JSON, GitHub annotations and SARIF. The seeds are the malicious files
// tests/integration/test_scan.py and test_scan_classes.py build (each payload would touch a marker
// file if it ran; here nothing runs) and a few benign checkpoints.
#include <cstdint>
#include <sstream>
#include <string>

#include "ckpt/error.hpp"
#include "ckpt/scan.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const ckpt::GlobalPolicy policy = [] {
        ckpt::GlobalPolicy p;
        p.allow("mylib.*", "fuzz");
        p.allow("os.*", "fuzz");  // never lifts what runs code
        return p;
    }();
    ckpt::ScanOptions options;
    options.policy = &policy;
    try {
        ckpt::ScanReport r = ckpt::scan_bytes({data, size}, "input", options);
        std::ostringstream text;
        ckpt::render_text(r, text, {}, true);
        (void)ckpt::to_json({r}, false).dump(1, ' ', false, nlohmann::json::error_handler_t::replace);
        (void)ckpt::github_annotations(r);
        (void)ckpt::to_sarif({r}, {}).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    } catch (const ckpt::Error&) {
    }
    return 0;
}
