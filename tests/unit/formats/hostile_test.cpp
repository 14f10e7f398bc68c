// The hostile-input table: each input built byte by byte here, run through the real binary.
// Each must end in exit 2 with a one-line message naming the file, or in a clean report (exit 0);
// never a crash, never a command run.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <dirent.h>
#include <sys/stat.h>

#include <functional>

#include "support/builders.hpp"
#include "support/run.hpp"

using testing::PickleBuilder;
using testing::Bytes;

namespace {

Bytes floats(size_t n) { return Bytes(n * 4, '\0'); }

Bytes good_pickle() {
    PickleBuilder p;
    p.proto(2).global("collections", "OrderedDict").empty_tuple().reduce().mark();
    p.str("w").tensor("FloatStorage", "0", 6, 0, {2, 3}, {3, 1});
    p.str("b").tensor("FloatStorage", "1", 3, 0, {3}, {1});
    p.setitems().stop();
    return p.bytes();
}
Bytes legacy_pickle() {
    PickleBuilder p;
    p.legacy().proto(2).global("collections", "OrderedDict").empty_tuple().reduce().mark();
    p.str("w").tensor("FloatStorage", "0", 6, 0, {2, 3}, {3, 1});
    p.str("b").tensor("FloatStorage", "1", 3, 0, {3}, {1});
    p.setitems().stop();
    return p.bytes();
}
Bytes good_legacy() { return testing::legacy_file(legacy_pickle(), {{"0", 6, floats(6)}, {"1", 3, floats(3)}}); }
Bytes good_zip() { return testing::torch_zip("h", good_pickle(), {{"0", floats(6)}, {"1", floats(3)}}); }
Bytes zip_of(const Bytes& pickle, const std::vector<std::pair<std::string, Bytes>>& storages = {{"0", floats(6)}, {"1", floats(3)}}) {
    return testing::torch_zip("h", pickle, storages);
}
// {"w": tensor over storage "0" (claimed numel, offset, shape, stride)} over a 6-float record.
Bytes one_tensor_zip(int64_t numel, int64_t offset, const std::vector<int64_t>& shape,
                     const std::vector<int64_t>& stride) {
    PickleBuilder p;
    p.proto(2).empty_dict().str("w").tensor("FloatStorage", "0", numel, offset, shape, stride).setitem().stop();
    return zip_of(p.bytes(), {{"0", floats(6)}});
}
bool exists(const std::string& p) { struct stat st; return ::stat(p.c_str(), &st) == 0; }
Bytes int64s(const std::vector<int64_t>& v) {
    Bytes b;
    for (int64_t x : v)
        for (int i = 0; i < 8; ++i) b += char((uint64_t(x) >> (8 * i)) & 0xff);
    return b;
}
// {"s": _rebuild_sparse_tensor(torch.LAYOUT, (indices [2, 3], values at `offset` of `shape` over 3
// floats, size (4, 4)))}
Bytes sparse_zip(const std::string& layout, int64_t offset, const std::vector<int64_t>& shape) {
    PickleBuilder p;
    p.proto(2).empty_dict().str("s").global("torch._utils", "_rebuild_sparse_tensor").mark().global("torch", layout);
    p.mark().raw(PickleBuilder().tensor("LongStorage", "0", 6, 0, {2, 3}, {3, 1}).bytes());
    p.raw(PickleBuilder().tensor("FloatStorage", "1", 3, offset, shape, {1}).bytes());
    p.mark().integer(4).integer(4).tuple().tuple().tuple().reduce().setitem().stop();
    return zip_of(p.bytes(), {{"0", Bytes(48, '\0')}, {"1", floats(3)}});
}
// {"n": _rebuild_nested_tensor(a buffer of 6 floats, sizes [[2, 3]], strides [[3, 1]], `offsets`)}
Bytes nested_zip(const std::vector<int64_t>& offsets) {
    PickleBuilder p;
    p.proto(2).empty_dict().str("n").global("torch._utils", "_rebuild_nested_tensor").mark();
    p.raw(PickleBuilder().tensor("FloatStorage", "0", 6, 0, {6}, {1}).bytes());
    p.raw(PickleBuilder().tensor("LongStorage", "1", 2, 0, {1, 2}, {2, 1}).bytes());
    p.raw(PickleBuilder().tensor("LongStorage", "2", 2, 0, {1, 2}, {2, 1}).bytes());
    p.raw(PickleBuilder().tensor("LongStorage", "3", int64_t(offsets.size()), 0, {int64_t(offsets.size())}, {1}).bytes());
    p.tuple().reduce().setitem().stop();
    return zip_of(p.bytes(), {{"0", floats(6)}, {"1", int64s({2, 3})}, {"2", int64s({3, 1})}, {"3", int64s(offsets)}});
}

struct Row {
    const char* name;
    std::function<Bytes(const std::string& marker)> make;
    int exit_code;          // 2: refused; 0: read and reported
    const char* message;    // in stderr (exit 2) or stdout (exit 0)
};

// The EOCD sits in the last 22 bytes of these files (no comment).
Bytes patch_u32(Bytes b, size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) b[at + i] = char((v >> (8 * i)) & 0xff);
    return b;
}

const Row k_rows[] = {
    {"empty file", [](auto&) { return Bytes(); }, 2, "empty file"},
    {"not a zip", [](auto&) { return Bytes("just some text\n"); }, 2, "not a PyTorch checkpoint"},
    {"truncated in the first local header", [](auto&) { return good_zip().substr(0, 10); }, 2, "zip"},
    {"truncated in the middle", [](auto&) { Bytes z = good_zip(); return z.substr(0, z.size() / 2); }, 2, "zip"},
    {"truncated in the central directory", [](auto&) { Bytes z = good_zip(); return z.substr(0, z.size() - 40); }, 2, "zip"},
    {"truncated end record", [](auto&) { Bytes z = good_zip(); return z.substr(0, z.size() - 3); }, 2, "truncated or still being written: "},
    {"central directory offset past the end",
     [](auto&) { Bytes z = good_zip(); return patch_u32(z, z.size() - 22 + 16, 0x7fffffff); }, 2, "outside the file"},
    {"central directory size past the end",
     [](auto&) { Bytes z = good_zip(); return patch_u32(z, z.size() - 22 + 12, 0x7fffffff); }, 2, "outside the file"},
    {"local header offset past the end",
     [](auto&) {
         Bytes z = good_zip();
         uint32_t cd = 0;
         for (int i = 0; i < 4; ++i) cd |= uint32_t(uint8_t(z[z.size() - 22 + 16 + i])) << (8 * i);
         return patch_u32(z, cd + 42, 0x70000000);
     }, 2, "runs past the start of the central directory"},
    {"zip without data.pkl", [](auto&) { return testing::ZipBuilder().add("h/other", "x").build(); }, 2, "without h/data.pkl"},
    {"zip records not in a folder", [](auto&) { return testing::ZipBuilder().add("data.pkl", good_pickle()).build(); }, 2, "not in a folder"},
    {"missing data/1 record", [](auto&) { return zip_of(good_pickle(), {{"0", floats(6)}}); }, 2, "has no record h/data/1"},
    {"storage offset past the record",
     [](auto&) { return one_tensor_zip(6, 5, {2}, {1}); }, 2, "runs past the end of storage 0"},
    {"shape past the record",
     [](auto&) { return one_tensor_zip(6, 0, {4, 4}, {4, 1}); }, 2, "runs past the end of storage 0"},
    {"numel that lies about the record",
     [](auto&) { return one_tensor_zip(1000, 0, {2}, {1}); }, 2, "holds 24 bytes, but storage 0 is 1000"},
    {"element count that overflows",
     [](auto&) { return one_tensor_zip(6, 0, {1ll << 40, 1ll << 40}, {1, 1}); }, 2, "overflows"},
    {"rebuild with a non-storage argument",
     [](auto&) {
         PickleBuilder p;
         p.proto(2).global("torch._utils", "_rebuild_tensor_v2").mark().integer(1).integer(0)
             .mark().tuple().mark().tuple().newfalse().op('N').tuple().reduce().stop();
         return zip_of(p.bytes());
     }, 2, "without a storage"},
    {"persistent id that is not a storage",
     [](auto&) { PickleBuilder p; p.proto(2).str("evil").op('Q').stop(); return zip_of(p.bytes()); }, 2,
     "not a torch storage reference"},
    {"nesting 100,000 deep",
     [](auto&) { return zip_of("\x80\x02" + Bytes(100000, ']') + Bytes(99999, 'a') + "."); }, 2, "nesting deeper than 1000"},
    {"100,000 MARKs", [](auto&) { return zip_of("\x80\x02" + Bytes(100000, '(') + "N."); }, 0, "None"},
    // Found by fuzz_pickle: a float key was cast to int64 before its range was checked.
    {"dict keyed by 1e300 and inf", [](auto&) { return zip_of(Bytes("\x80\x02}(G\x7e\x37\xe4\x3c\x88\x00\x75\x9cK\x01G\x7f\xf0\x00\x00\x00\x00\x00\x00K\x02u.", 28)); },
     0, "1e+300"},
    {"memo index out of range", [](auto&) { return zip_of("\x80\x02h\x07."); }, 2, "memo index 7 is not defined"},
    {"long memo index out of range", [](auto&) { return zip_of(Bytes("\x80\x02j\xff\xff\xff\xff.", 8)); }, 2, "memo index 4294967295"},
    {"unknown opcode", [](auto&) { return zip_of("\x80\x02\xfe."); }, 2, "unknown opcode 0xfe"},
    {"pickle without STOP", [](auto&) { return zip_of("\x80\x02}"); }, 2, "without a STOP"},
    {"string length lies", [](auto&) { return zip_of(Bytes("\x80\x02X\xff\xff\xff\x7f", 7)); }, 2, "truncated"},
    {"negative LONG4 length", [](auto&) { return zip_of(Bytes("\x80\x02\x8b\xff\xff\xff\xff.", 8)); }, 2, "negative length"},
    {"legacy format", [](auto&) { return good_legacy(); }, 0, "legacy"},
    {"legacy, big-endian", [](auto&) { return testing::legacy_file(legacy_pickle(), {{"0", 6, floats(6)}, {"1", 3, floats(3)}}, false); },
     0, "big"},
    {"legacy, protocol version 1000",
     [](auto&) { return testing::legacy_file(legacy_pickle(), {{"0", 6, floats(6)}, {"1", 3, floats(3)}}, true, 1000); }, 2,
     "protocol version 1000"},
    {"legacy, truncated in a storage", [](auto&) { Bytes f = good_legacy(); return f.substr(0, f.size() - 5); }, 2, "holds 7 bytes"},
    {"legacy, truncated in the key list", [](auto&) { Bytes f = good_legacy(); return f.substr(0, f.size() - 52 - 2); }, 2, "storage key list"},
    {"legacy, element count disagrees", [](auto&) { return testing::legacy_file(legacy_pickle(), {{"0", 5, floats(5)}, {"1", 3, floats(3)}}); },
     2, "holds 20 bytes, but storage 0"},
    {"legacy, element count overflows",
     [](auto&) { return testing::legacy_file(legacy_pickle(), {{"0", int64_t(0x4000000000000001), floats(6)}, {"1", 3, floats(3)}}); }, 2,
     "claims"},
    {"legacy, a key no tensor uses",
     [](auto&) { return testing::legacy_file(legacy_pickle(), {{"0", 6, floats(6)}, {"1", 3, floats(3)}, {"9", 1, floats(1)}}); }, 2,
     "listed but no tensor uses it"},
    {"legacy, a key listed twice", [](auto&) { return testing::legacy_file(legacy_pickle(), {{"0", 6, floats(6)}, {"0", 6, floats(6)}}); },
     2, "listed twice"},
    {"legacy, a storage view past its storage",
     [](auto&) {
         PickleBuilder p;
         p.proto(2).global("torch._utils", "_rebuild_tensor_v2").mark();
         p.mark().str("storage").global("torch", "FloatStorage").str("0").str("cpu").integer(6);
         p.mark().str("1").integer(3).integer(6).tuple().tuple().op('Q');
         p.integer(0).mark().integer(6).tuple().mark().integer(1).tuple().newfalse();
         p.global("collections", "OrderedDict").empty_tuple().reduce().tuple().reduce().stop();
         return testing::legacy_file(p.bytes(), {{"0", 6, floats(6)}});
     }, 2, "storage view 1 (elements 3+6) lies outside storage 0"},
    {"legacy, a tensor past the end of its storage view",
     [](auto&) {
         PickleBuilder p;
         p.proto(2).global("torch._utils", "_rebuild_tensor_v2").mark();
         p.mark().str("storage").global("torch", "FloatStorage").str("0").str("cpu").integer(6);
         p.mark().str("1").integer(2).integer(3).tuple().tuple().op('Q');
         p.integer(0).mark().integer(4).tuple().mark().integer(1).tuple().newfalse();
         p.global("collections", "OrderedDict").empty_tuple().reduce().tuple().reduce().stop();
         return testing::legacy_file(p.bytes(), {{"0", 6, floats(6)}});
     }, 2, "runs past the end of its storage slice (3 elements)"},
    {"legacy, malformed storage view metadata",
     [](auto&) {
         PickleBuilder p;
         p.proto(2).global("torch._utils", "_rebuild_tensor_v2").mark();
         p.mark().str("storage").global("torch", "FloatStorage").str("0").str("cpu").integer(6);
         p.mark().str("1").integer(-2).integer(3).tuple().tuple().op('Q');
         p.integer(0).mark().integer(1).tuple().mark().integer(1).tuple().newfalse();
         p.global("collections", "OrderedDict").empty_tuple().reduce().tuple().reduce().stop();
         return testing::legacy_file(p.bytes(), {{"0", 6, floats(6)}});
     }, 2, "malformed storage view"},
    // torch 2.x's tensors made of others: a lie in any part is refused, never read past.
    {"sparse, a layout that is not sparse", [](auto&) { return sparse_zip("strided", 0, {3}); }, 2, "is not a sparse layout"},
    {"sparse COO, indices for 3 values and 2 values", [](auto&) { return sparse_zip("sparse_coo", 0, {2}); }, 2,
     "do not make a tensor of [4, 4]"},
    {"sparse COO, values past their storage", [](auto&) { return sparse_zip("sparse_coo", 1, {3}); }, 2,
     "s.values (offset 1, spans 3 elements) runs past the end of storage 1"},
    {"nested, a component past its buffer", [](auto&) { return nested_zip({4}); }, 2,
     "n[0] (offset 4, spans 6 elements) runs past the end of storage 0"},
    {"nested, sizes that do not agree with the offsets", [](auto&) { return nested_zip({0, 0}); }, 2,
     "sizes, strides and offsets do not agree"},
    {"quantized, an unknown scheme",
     [](auto&) {
         PickleBuilder p;
         p.proto(2).empty_dict().str("q").global("torch._utils", "_rebuild_qtensor").mark();
         p.storage("QInt8Storage", "0", 4).integer(0).mark().integer(4).tuple().mark().integer(1).tuple();
         p.mark().global("torch", "per_pixel_affine").integer(1).integer(0).tuple().newfalse();
         p.global("collections", "OrderedDict").empty_tuple().reduce().tuple().reduce().setitem().stop();
         return zip_of(p.bytes(), {{"0", Bytes(4, '\0')}});
     }, 2, "unknown quantization scheme torch.per_pixel_affine"},
    {"an unknown tensor rebuild function",
     [](auto&) {
         PickleBuilder p;
         p.proto(2).empty_dict().str("t").global("torch._utils", "_rebuild_tensor_v9").mark().integer(1).tuple().reduce().setitem().stop();
         return zip_of(p.bytes(), {});
     }, 2, "tensors rebuilt by torch._utils._rebuild_tensor_v9 are not read"},
    {"meta tensor with a negative size",
     [](auto&) {
         PickleBuilder p;
         p.proto(2).empty_dict().str("m").global("torch._utils", "_rebuild_meta_tensor_no_storage").mark().global("torch", "float32");
         p.mark().integer(-3).tuple().mark().integer(1).tuple().newfalse().tuple().reduce().setitem().stop();
         return zip_of(p.bytes(), {});
     }, 2, "negative size or stride"},
    {"legacy, posix.system payload",
     [](const std::string& marker) {
         PickleBuilder p;
         p.proto(2).global("posix", "system").mark().str("touch " + marker).tuple().reduce().stop();
         return testing::legacy_file(p.bytes(), {});
     }, 0, "posix.system would run code"},
    {"posix.system payload",
     [](const std::string& marker) {
         PickleBuilder p;
         p.proto(2).global("posix", "system").mark().str("touch " + marker).tuple().reduce().stop();
         return zip_of(p.bytes());
     }, 0, "posix.system would run code"},
    {"builtins.eval payload",
     [](const std::string& marker) {
         PickleBuilder p;
         p.proto(2).global("builtins", "eval").mark().str("__import__('os').system('touch " + marker + "')").tuple().reduce().stop();
         return zip_of(p.bytes());
     }, 0, "builtins.eval would run code"},
    {"STACK_GLOBAL os.system through the memo",
     [](const std::string& marker) {
         PickleBuilder p;
         p.proto(4).short_str("os").binput(0).short_str("system").binput(1).binget(0).binget(1).op('\x93')
             .mark().str("touch " + marker).tuple().reduce().stop();
         return zip_of(p.bytes());
     }, 0, "os.system would run code"},
    {"a key repeated to hide a tensor",
     [](auto&) {
         PickleBuilder p;
         p.proto(2).empty_dict().mark().str("w").integer(1).str("w").tensor("FloatStorage", "0", 6, 0, {6}, {1}).setitems().stop();
         return zip_of(p.bytes(), {{"0", floats(6)}});
     }, 0, "float32"},
    {"a dict that contains itself",
     [](auto&) {
         PickleBuilder p;
         p.proto(2).empty_dict().binput(0).mark().str("self").binget(0).str("w")
             .tensor("FloatStorage", "0", 6, 0, {6}, {1}).setitems().stop();
         return zip_of(p.bytes(), {{"0", floats(6)}});
     }, 0, "self"},
    {"damaged deflate data.pkl",
     [](auto&) {
         Bytes pk(4000, 'N');
         Bytes z = testing::ZipBuilder().add("h/data.pkl", pk, true).build();
         for (size_t i = 30 + 10; i < 30 + 10 + 6; ++i) z[i] = '\xff';
         return z;
     }, 2, "data.pkl"},
};

}  // namespace

TEST_CASE("hostile inputs: refused with a clear message or read cleanly, never a crash") {
    std::string dir = testing::scratch_dir("hostile");
    int n = 0;
    for (const Row& row : k_rows) {
        std::string marker = dir + "/marker" + std::to_string(n);
        std::string path = dir + "/case" + std::to_string(n++) + ".pth";
        testing::write_file(path, row.make(marker));
        for (bool json : {false, true}) {
            std::vector<std::string> args{"inspect", path};
            if (json) args.push_back("--json");
            testing::RunResult r = testing::run_tool(args);
            INFO(row.name << (json ? " (--json)" : "") << "\nstdout: " << r.out << "\nstderr: " << r.err);
            CHECK(r.signal == 0);
            CHECK(r.exit_code == row.exit_code);
            if (row.exit_code == 2) {
                if (!json) {
                    CHECK(r.out.empty());  // never a partial table
                } else {  // one JSON object of the error, never a partial report (error.schema.json)
                    nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
                    REQUIRE_FALSE(j.is_discarded());
                    CHECK(j.value("command", "") == "inspect");
                    CHECK(j["error"].value("file", "") == path);
                    CHECK("ckpt-tool: error: " + j["error"].value("message", "") + "\n" == r.err);
                }
                CHECK(r.err.find(path) != std::string::npos);
                CHECK(r.err.find(row.message) != std::string::npos);
                CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);  // one line
            } else {
                CHECK(r.out.find(row.message) != std::string::npos);
            }
            CHECK_FALSE(exists(marker));  // no payload ever runs
        }
    }
}

TEST_CASE("hostile inputs: strip-prefix, diff-keys, verify and convert refuse them cleanly and write nothing") {
    std::string dir = testing::scratch_dir("hostile_repair");
    int n = 0;
    for (const Row& row : k_rows) {
        std::string marker = dir + "/marker" + std::to_string(n);
        std::string path = dir + "/case" + std::to_string(n) + ".pth";
        std::string out = dir + "/case" + std::to_string(n++) + ".out.pth";
        testing::write_file(path, row.make(marker));
        std::remove(out.c_str());
        testing::RunResult r = testing::run_tool({"strip-prefix", path, "-o", out, "--prefix", "module."});
        INFO(row.name << "\nstdout: " << r.out << "\nstderr: " << r.err);
        CHECK(r.signal == 0);
        // None of these files carries a module. key, so none can be repaired: exit 2, always.
        CHECK(r.exit_code == 2);
        CHECK(r.err.find(path) != std::string::npos);
        CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
        CHECK_FALSE(exists(out));
        testing::RunResult d = testing::run_tool({"diff-keys", path, path});
        INFO("diff-keys stdout: " << d.out << "\nstderr: " << d.err);
        CHECK(d.signal == 0);
        CHECK((d.exit_code == 0 || d.exit_code == 2));
        // verify reads every byte: findings (1) or an error (2), never a crash, never a payload run.
        testing::RunResult v = testing::run_tool({"verify", path, "--all"});
        INFO("verify stdout: " << v.out << "\nstderr: " << v.err);
        CHECK(v.signal == 0);
        CHECK((v.exit_code == 0 || v.exit_code == 1 || v.exit_code == 2));
        if (row.exit_code == 2) CHECK(v.exit_code != 0);  // what inspect refuses is never "ok"
        // convert (pth → pth keeps the whole file, and to safetensors): written and checked, or refused.
        for (const char* ext : {".conv.pth", ".conv.safetensors"}) {
            std::string conv = dir + "/case" + std::to_string(n - 1) + ext;
            std::remove(conv.c_str());
            testing::RunResult c = testing::run_tool({"convert", path, "-o", conv});
            INFO("convert " << ext << " stdout: " << c.out << "\nstderr: " << c.err);
            CHECK(c.signal == 0);
            CHECK((c.exit_code == 0 || c.exit_code == 2));
            if (row.exit_code == 2) CHECK(c.exit_code == 2);
            CHECK(exists(conv) == (c.exit_code == 0));
            if (c.exit_code == 2) CHECK(std::count(c.err.begin(), c.err.end(), '\n') == 1);
        }
        CHECK_FALSE(exists(marker));
    }
    size_t temporaries = 0;  // AtomicFile names them ".NAME.XXXXXXXX.tmp"
    DIR* d = opendir(dir.c_str());
    while (dirent* e = readdir(d)) temporaries += std::string(e->d_name).find(".tmp") != std::string::npos;
    closedir(d);
    CHECK(temporaries == 0);
}
