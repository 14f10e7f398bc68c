// `scan` on any bytes, as `ckpt-tool scan FILE` runs it: the input is written to a memfd and scanned
// by its /proc/self/fd path (format sniffing, every pickle of a zip, the legacy header pickles, bare
// pickles, pickles nested in bytes, the polyglot checks), then rendered as text and as JSON. The
// seeds are the malicious corpus of tests/integration/test_scan.py (each payload would touch a
// marker file if it ran; here nothing runs) and a few benign checkpoints.
#include <cstdint>
#include <sstream>
#include <string>

#include "ckpt/error.hpp"
#include "ckpt/scan.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string& path = ckpt_fuzz::input_file().write(data, size);
    try {
        ckpt::ScanReport r = ckpt::scan_file(path);
        std::ostringstream text;
        ckpt::render_text(r, text, {});
        (void)ckpt::to_json({r}, true).dump(1, ' ', false, nlohmann::json::error_handler_t::replace);
    } catch (const ckpt::Error&) {
    }
    return 0;
}
