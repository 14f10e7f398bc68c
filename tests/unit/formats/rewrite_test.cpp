// The writing side of strip-prefix: the zip writer, the atomic file, the rename rules and the
// pickle patcher, each on inputs built byte by byte.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <dirent.h>

#include "ckpt/atomic_file.hpp"
#include "ckpt/checkpoint.hpp"
#include "ckpt/error.hpp"
#include "io/mapped_file.hpp"
#include "ckpt/strip_prefix.hpp"
#include "io/zip.hpp"
#include "io/zip_writer.hpp"
#include "support/builders.hpp"

using namespace ckpt;
using testing::PickleBuilder;

namespace {

std::string read_file(const std::string& path) {
    MappedFile f(path);
    return std::string(f.view().as_chars());
}

size_t temporaries(const std::string& dir) {
    size_t n = 0;
    DIR* d = opendir(dir.c_str());
    while (dirent* e = readdir(d)) n += std::string(e->d_name).find(".tmp") != std::string::npos;
    closedir(d);
    return n;
}

}  // namespace

TEST_CASE("zip writer: records read back aligned, with their CRC, through the reader") {
    std::string dir = testing::scratch_dir("rewrite_test");
    std::string src = dir + "/src.bin";
    testing::write_file(src, "0123456789abcdefghij");
    std::string big_src = dir + "/big.bin", big;  // past OutputWriter::k_small: copied by the kernel
    for (int i = 0; big.size() < 100'000; ++i) big += std::to_string(i) + ",";
    testing::write_file(big_src, big);
    std::string out = dir + "/out.zip";
    {
        AtomicFile f(out);
        ZipWriter w(f.fd(), out);
        std::string pkl = "hello pickle";
        ByteView pv{reinterpret_cast<const uint8_t*>(pkl.data()), pkl.size()};
        w.add("r/data.pkl", pv, crc32_of(pv));
        MappedFile in(src);
        ByteView part{in.view().data + 5, 7};
        w.add_copy("r/data/0", in, 5, 7, crc32_of(part));  // small: through the writer's buffer
        MappedFile big_in(big_src);
        w.add_copy("r/data/1", big_in, 3, big.size() - 3, crc32_of(*big_in.view().sub(3, big.size() - 3)));
        w.add("r/version", {reinterpret_cast<const uint8_t*>("3\n"), 2}, crc32_of({reinterpret_cast<const uint8_t*>("3\n"), 2}));
        uint64_t size = w.finish();
        f.commit(false);
        struct stat st {};
        REQUIRE(stat(out.c_str(), &st) == 0);
        CHECK(static_cast<uint64_t>(st.st_size) == size);
    }
    MappedFile m(out);
    ZipArchive z = ZipArchive::open(m.view());
    REQUIRE(z.entries().size() == 4);
    CHECK(z.zip64());  // torch writes the ZIP64 end records on every file, and so do we
    std::string big_part = big.substr(3);
    const char* names[] = {"r/data.pkl", "r/data/0", "r/data/1", "r/version"};
    const char* data[] = {"hello pickle", "56789ab", big_part.c_str(), "3\n"};
    for (int i = 0; i < 4; ++i) {
        const ZipEntry& e = z.entries()[i];
        CHECK(e.name == names[i]);
        CHECK(e.method == 0);
        CHECK(z.data_offset(e) % 64 == 0);
        CHECK(std::string(z.record_data(e).view().as_chars()) == data[i]);
        CHECK(z.compute_crc32(e) == e.crc32);
    }
}

TEST_CASE("atomic file: nothing appears until commit; no-replace commit refuses an existing file") {
    std::string dir = testing::scratch_dir("rewrite_test_atomic");
    std::string target = dir + "/out.pth";
    ::unlink(target.c_str());
    {
        AtomicFile f(target);
        write_all(f.fd(), "abc", 3, 0, target);
        CHECK(access(target.c_str(), F_OK) != 0);
        CHECK(temporaries(dir) == 1);
    }  // destroyed uncommitted
    CHECK(access(target.c_str(), F_OK) != 0);
    CHECK(temporaries(dir) == 0);

    {
        AtomicFile f(target);
        write_all(f.fd(), "first", 5, 0, target);
        f.commit(false);
    }
    CHECK(read_file(target) == "first");
    {
        AtomicFile f(target);
        write_all(f.fd(), "second", 6, 0, target);
        CHECK_THROWS_WITH(f.commit(false), Catch::Contains("exists"));
    }
    CHECK(read_file(target) == "first");
    CHECK(temporaries(dir) == 0);
    {
        AtomicFile f(target);
        write_all(f.fd(), "second", 6, 0, target);
        f.commit(true);
    }
    CHECK(read_file(target) == "second");
    CHECK_THROWS_AS(AtomicFile(dir + "/missing/dir/x.pth"), Error);
}

TEST_CASE("atomic file: the background fsync's failure surfaces at commit as Error(io) naming the target") {
    std::string dir = testing::scratch_dir("rewrite_test_bg_sync");
    std::string target = dir + "/out.pth";
    ::unlink(target.c_str());
    {  // the good case: started, then committed (commit waits for it)
        AtomicFile f(target);
        write_all(f.fd(), "synced", 6, 0, target);
        f.start_sync();
        f.start_sync();  // once is enough; a second start is a no-op
        f.commit(false);
    }
    CHECK(read_file(target) == "synced");
    ::unlink(target.c_str());
    {  // fsync of a pipe fails (EINVAL): the fd swapped for one underneath the AtomicFile
        AtomicFile f(target);
        write_all(f.fd(), "never", 5, 0, target);
        int p[2];
        REQUIRE(::pipe(p) == 0);
        REQUIRE(::dup2(p[0], f.fd()) == f.fd());
        ::close(p[0]);
        ::close(p[1]);
        f.start_sync();
        try {
            f.commit(false);
            FAIL("commit succeeded over a failed fsync");
        } catch (const Error& e) {
            CHECK(e.kind() == ErrorKind::io);
            CHECK(e.path() == target);
            CHECK_THAT(e.message(), Catch::Contains("cannot flush to disk"));
        }
    }  // destroyed uncommitted: the temporary goes
    CHECK(access(target.c_str(), F_OK) != 0);
    CHECK(temporaries(dir) == 0);
    {  // discarded while the fsync may still run: it is waited for, then the temporary goes
        AtomicFile f(target);
        std::string big(8 << 20, 'x');
        write_all(f.fd(), big.data(), big.size(), 0, target);
        f.start_sync();
    }
    CHECK(access(target.c_str(), F_OK) != 0);
    CHECK(temporaries(dir) == 0);
}

TEST_CASE("atomic file: a temporary left by a killed writer goes with the next commit of that target") {
    std::string dir = testing::scratch_dir("rewrite_test_stale");
    std::string target = dir + "/out.pth";
    pid_t child = fork();
    if (child == 0) {
        AtomicFile f(target);
        write_all(f.fd(), "half", 4, 0, target);
        ::raise(SIGKILL);  // no handler, no destructor: the temporary stays
        _exit(0);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    REQUIRE(WIFSIGNALED(status));
    CHECK(temporaries(dir) == 1);
    testing::write_file(dir + "/.out.pth.1.0badc0de.tmp", "a live writer's (pid 1 is init)");
    testing::write_file(dir + "/.other.pth." + std::to_string(child) + ".0badc0de.tmp", "another target's");
    testing::write_file(dir + "/.out.pth.notapid.tmp", "not our name");
    CHECK(temporaries(dir) == 4);
    {
        AtomicFile f(target);
        write_all(f.fd(), "whole", 5, 0, target);
        f.commit(false);
    }
    CHECK(read_file(target) == "whole");
    CHECK(temporaries(dir) == 3);  // only the dead writer's temporary of out.pth is gone
    CHECK(access((dir + "/.out.pth.1.0badc0de.tmp").c_str(), F_OK) == 0);
}

TEST_CASE("rename rule: keys and _metadata paths the way torch's consume_prefix does") {
    RenameRule strip{{"module.", "_orig_mod."}, ""};
    CHECK(strip.key("module._orig_mod.fc.weight") == "fc.weight");
    CHECK(strip.key("_orig_mod.fc.weight") == "fc.weight");  // each prefix only where present
    CHECK(strip.key("fc.weight") == "fc.weight");
    CHECK(strip.metadata_key("") == "");
    CHECK(strip.metadata_key("module") == "");
    CHECK(strip.metadata_key("module._orig_mod") == "");
    CHECK(strip.metadata_key("module._orig_mod.fc") == "fc");
    CHECK(strip.metadata_key("modules.x") == "modules.x");  // "module" only as a whole component
    RenameRule add{{}, "module."};
    CHECK(add.key("fc.weight") == "module.fc.weight");
    CHECK(add.metadata_key("") == "module");
    CHECK(add.metadata_key("fc") == "module.fc");
    RenameRule swap{{"model."}, "module."};
    CHECK(swap.key("model.fc.weight") == "module.fc.weight");
    CHECK(swap.metadata_key("model") == "module");
}

TEST_CASE("pickle patch: renames keys in every opcode form and leaves shared strings alone") {
    std::string dir = testing::scratch_dir("rewrite_test_patch");
    auto t = [](PickleBuilder& p, const char* key) { p.tensor("FloatStorage", key, 2, 0, {2}, {1}); };
    // FRAME · {"pre": ["module.c" (BINPUT 1)],
    //          "sd": {"module.a" (X, BINPUT 2): T0, "module.b" (V, text): T1, <BINGET 1>: T2,
    //                 "module.a" again (S, text; a repeated key keeps its place): T3},
    //          "names": [<BINGET 2>, <BINGET 1>]}
    PickleBuilder p;
    p.proto(4).raw(std::string("\x95") + std::string(8, '\0'));
    p.empty_dict().mark();
    p.str("pre").mark().short_str("module.c").binput(1).op('l');
    p.str("sd").empty_dict().mark();
    p.str("module.a").binput(2);
    t(p, "0");
    p.raw("Vmodule.b\n");
    t(p, "1");
    p.binget(1);
    t(p, "2");
    p.raw("S'module.a'\n");
    t(p, "3");
    p.setitems();
    p.str("names").mark().binget(2).binget(1).op('l');
    p.setitems().stop();
    std::vector<std::pair<std::string, std::string>> storages;
    for (const char* k : {"0", "1", "2", "3"}) storages.push_back({k, std::string(8, '\x11')});
    std::string in = dir + "/p.pth", out = dir + "/p.out.pth";
    ::unlink(out.c_str());
    testing::write_file(in, testing::torch_zip("p", p.bytes(), storages));

    StripPrefixRequest rq;
    rq.input = in;
    rq.output = out;
    rq.options.prefixes = {"module."};
    StripPrefixReport r = strip_prefix(rq);
    CHECK(r.plan.renamed.size() == 3);
    auto c = Checkpoint::open(out);
    std::vector<std::string> names;
    for (const auto& e : c->state_dict().entries) names.push_back(std::string(e.name));
    CHECK(names == std::vector<std::string>{"a", "b", "c"});
    CHECK(c->state_dict().path == "sd");
    CHECK(repr(c->root()->get("pre")) == "['module.c']");
    CHECK(repr(c->root()->get("names")) == "['module.a', 'module.c']");
    // The repeated key's second site was renamed too: it still lands on "a" (T3 wins, as in Python).
    const TensorInfo& a = c->tensors()[*c->entries()[c->state_dict().entries[0].entry].tensor];
    CHECK(c->storages()[a.storage].key == "3");
    // No FRAME left (its length would be stale).
    ByteView pk = c->pickle_bytes();
    CHECK(std::string(pk.as_chars()).find('\x95') == std::string::npos);
}

TEST_CASE("pickle patch: a key pushed by an opcode it cannot rewrite is an error, nothing written") {
    std::string dir = testing::scratch_dir("rewrite_test_dup");
    // {"module.q": "module.z", "module.z" (DUP of the value before): T0}
    PickleBuilder p;
    p.proto(2).empty_dict().mark().str("module.q").str("module.z").op('2');
    p.tensor("FloatStorage", "0", 2, 0, {2}, {1});
    p.setitems().stop();
    std::string in = dir + "/dup.pth", out = dir + "/dup.out.pth";
    ::unlink(out.c_str());
    testing::write_file(in, testing::torch_zip("dup", p.bytes(), {{"0", std::string(8, '\0')}}));
    StripPrefixRequest rq;
    rq.input = in;
    rq.output = out;
    CHECK_THROWS_WITH(strip_prefix(rq), Catch::Contains("opcode 0x32"));
    CHECK(access(out.c_str(), F_OK) != 0);
    CHECK(temporaries(dir) == 0);
}

TEST_CASE("strip-prefix: keys without a wrapper prefix are already clean; some with one are not every key") {
    std::string dir = testing::scratch_dir("strip_clean");
    auto write = [&](const std::string& name, const std::vector<std::string>& keys) {
        PickleBuilder p;
        p.proto(2).empty_dict().mark();
        for (size_t i = 0; i < keys.size(); ++i) p.str(keys[i]).tensor("FloatStorage", std::to_string(i), 2, 0, {2}, {1});
        p.setitems().stop();
        std::vector<std::pair<std::string, std::string>> records;
        for (size_t i = 0; i < keys.size(); ++i) records.push_back({std::to_string(i), std::string(8, '\0')});
        testing::write_file(dir + "/" + name, testing::torch_zip("c", p.bytes(), records));
        StripPrefixRequest rq;
        rq.input = dir + "/" + name;
        rq.output = dir + "/" + name + ".out";
        return rq;
    };
    CHECK_THROWS_WITH(strip_prefix(write("clean.pth", {"conv.weight", "fc.bias"})),
                      Catch::Contains("already clean: no key starts with \"module.\" or \"_orig_mod.\", nothing to strip"));
    CHECK_THROWS_WITH(strip_prefix(write("mixed.pth", {"module.conv.weight", "fc.bias"})),
                      Catch::Contains("not every key starts with \"module.\" or \"_orig_mod.\" (1 of 2 keys start with \"module.\""));
    CHECK(temporaries(dir) == 0);
}
