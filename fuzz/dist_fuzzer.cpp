// The merged-view readers on any bytes, as `ckpt-tool inspect DIR` and `verify DIR` run them: the
// input is a few files of a folder (DeepSpeed ZeRO's model and optimizer states with `latest`,
// torch.distributed.checkpoint's .metadata and __R_0.distcp …), written to a fresh folder in memory
// (/dev/shm) and opened as a folder, so the layout sniffing, every rank file's reader, the
// partition and chunk arithmetic and the gather of each tensor run exactly as on a disk.
//
// The input: records of [u8 name length][name][u32 little-endian size][bytes], each one file (names
// of [A-Za-z0-9._-/] only, at most 3 levels, no "."/".." part; at most 24 files). The seeds are
// folders make_dist.py writes with torch 1.13, packed this way by make_corpus.py.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "ckpt/checkpoint.hpp"
#include "ckpt/error.hpp"
#include "ckpt/fingerprint.hpp"
#include "ckpt/inspect.hpp"
#include "fuzz_support.hpp"

namespace {

constexpr size_t k_max_files = 24;

bool good_name(const std::string& name) {
    if (name.empty() || name.size() > 96 || name.front() == '/' || name.back() == '/') return false;
    size_t slashes = 0;
    for (char c : name) {
        if (c == '/') ++slashes;
        else if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
    }
    if (slashes > 3) return false;
    for (size_t at = 0; at <= name.size();) {
        size_t end = name.find('/', at);
        if (end == std::string::npos) end = name.size();
        std::string part = name.substr(at, end - at);
        if (part.empty() || part == "." || part == "..") return false;
        at = end + 1;
    }
    return true;
}

// The folder the inputs are written under, removed at exit (kept in a buffer of its own: an atexit
// handler runs after the statics registered before it are gone).
char g_root[64];

const char* root() {
    if (!g_root[0]) {
        std::snprintf(g_root, sizeof g_root, "%s/ckpt-fuzz-dist-XXXXXX", ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
        if (!::mkdtemp(g_root)) std::abort();
        std::atexit([] {
            std::error_code ec;
            std::filesystem::remove_all(g_root, ec);
        });
    }
    return g_root;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    namespace fs = std::filesystem;
    const std::string dir = std::string(root()) + "/in";
    std::error_code ec;
    fs::remove_all(dir, ec);
    fs::create_directory(dir);
    size_t at = 0, files = 0;
    while (at < size && files < k_max_files) {
        size_t n = data[at++];
        if (at + n + 4 > size) break;
        std::string name(reinterpret_cast<const char*>(data + at), n);
        at += n;
        uint32_t len;
        std::memcpy(&len, data + at, 4);
        at += 4;
        len = static_cast<uint32_t>(std::min<size_t>(len, size - at));
        if (!good_name(name)) {
            at += len;
            continue;
        }
        fs::path p = fs::path(dir) / name;
        fs::create_directories(p.parent_path(), ec);
        std::ofstream out(p, std::ios::binary);
        out.write(reinterpret_cast<const char*>(data + at), len);
        at += len;
        ++files;
    }
    std::unique_ptr<ckpt::Checkpoint> c;
    try {
        c = ckpt::Checkpoint::open(dir);
    } catch (const ckpt::Error&) {
        return 0;
    }
    ckpt_fuzz::inspect_and_fingerprint(*c);
    return 0;
}
