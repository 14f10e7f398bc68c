#include <catch2/catch.hpp>

#include "ckpt/diff_keys.hpp"

using namespace ckpt;

namespace {
KeySet keys(const std::vector<std::string>& names, const std::string& kind = "manifest") {
    KeySet ks;
    ks.path = "x";
    ks.kind = kind;
    for (const auto& n : names) ks.add(n, "float32", Dims{2});
    return ks;
}
}  // namespace

TEST_CASE("diff-keys: a prefix most keys carry is found, and what it leaves is counted") {
    // SWA's AveragedModel: every parameter under module., plus its own n_averaged buffer.
    KeyDiff d = diff_keys(keys({"module.a", "module.b", "n_averaged"}), keys({"a", "b"}), {});
    CHECK_FALSE(d.match());
    REQUIRE(d.prefix_fix);
    CHECK(d.prefix_fix->strip == "module.");
    CHECK(d.prefix_fix->add == "");
    CHECK(d.prefix_fix->matched == 2);
    CHECK(d.prefix_fix->unexpected == 1);
    CHECK_FALSE(d.prefix_fix->complete());
    CHECK(d.prefix_fix->command.empty());  // the file is a manifest: nothing to repair
}

TEST_CASE("diff-keys: never proposes a change that gives two keys one name") {
    KeyDiff d = diff_keys(keys({"module.a", "a"}), keys({"a", "b"}), {});
    CHECK_FALSE(d.prefix_fix);
    CHECK(d.missing == std::vector<std::string>{"b"});
    CHECK(d.unexpected == std::vector<std::string>{"module.a"});
}

TEST_CASE("diff-keys: swapping one prefix for another, and the command that does it") {
    KeyDiff d = diff_keys(keys({"model.enc.w", "model.dec.w"}, "checkpoint"),
                          keys({"module.enc.w", "module.dec.w"}), {});
    REQUIRE(d.prefix_fix);
    CHECK(d.prefix_fix->strip == "model.");
    CHECK(d.prefix_fix->add == "module.");
    CHECK(d.prefix_fix->complete());
    CHECK(d.prefix_fix->command == "ckpt-tool strip-prefix x --prefix model. --add-prefix module. -o x_stripped");
}

TEST_CASE("diff-keys: shapes and dtypes, --ignore and --strict-dtype") {
    KeySet a = keys({"w", "b", "n"});
    KeySet b = keys({"w", "b", "n"});
    a.keys[0].shape = std::vector<int64_t>{3};
    a.keys[1].dtype = "float16";
    b.keys[2].shape.reset();  // unknown on one side: never a mismatch
    KeyDiff d = diff_keys(a, b, {});
    CHECK_FALSE(d.match());
    REQUIRE(d.shape_mismatch.size() == 1);
    CHECK(d.shape_mismatch[0].key == "w");
    REQUIRE(d.dtype_mismatch.size() == 1);
    KeyDiff ignored = diff_keys(a, b, {{"w"}, false});
    CHECK(ignored.match());  // a dtype difference alone is not a mismatch
    CHECK(ignored.ignored == 1);
    CHECK_FALSE(diff_keys(a, b, {{"w"}, true}).match());
}

TEST_CASE("diff-keys: --format github annotations, the fix first, dtype a warning unless --strict-dtype") {
    KeySet a = keys({"module.w", "module.b", "module.x,1:%\n"}, "checkpoint");
    a.path = "ckpt.pth";
    KeySet b = keys({"w", "b", "y"});
    b.path = "ref.json";
    KeyDiff d = diff_keys(a, b, {});
    REQUIRE(d.prefix_fix);
    CHECK(d.prefix_fix->residue_missing == std::vector<std::string>{"y"});
    CHECK(d.prefix_fix->residue_unexpected == std::vector<std::string>{"x,1:%\n"});
    std::vector<Annotation> g = github_annotations(d);
    REQUIRE(g.size() == 1 + 1 + 1);  // the prefix, as one error; what the fix leaves: y missing, x unexpected
    CHECK(g[0].level == "error");
    CHECK(g[0].title == "diff-keys: keys differ by a prefix");
    CHECK(g[0].message.find("2 keys differ only by a prefix (w, b): "
                            "stripping \"module.\" on ckpt.pth's keys makes 2 of 3 match") == 0);
    CHECK(g[0].message.find("; fix: ckpt-tool strip-prefix ckpt.pth -o ckpt_stripped.pth") != std::string::npos);
    CHECK(g[1].level == "error");
    CHECK(g[1].file == "ckpt.pth");
    CHECK(g[1].title == "diff-keys: missing key");
    CHECK(g[1].message == "y: in ref.json, not in ckpt.pth");
    CHECK(g[2].title == "diff-keys: unexpected key");
    CHECK(g[2].message == "x,1:%\n: in ckpt.pth, not in ref.json");

    KeySet c = keys({"w", "b"});
    c.path = "c.pth";
    c.keys[0].shape = std::vector<int64_t>{3, 4};
    c.keys[1].dtype = "float16";
    KeySet r = keys({"w", "b"});
    r.path = "r.pth";
    g = github_annotations(diff_keys(c, r, {}));
    REQUIRE(g.size() == 2);
    CHECK(g[0].title == "diff-keys: shape mismatch");
    CHECK(g[0].message.rfind("w: 3×4 vs 2 in the reference — ", 0) == 0);
    CHECK(g[1].level == "warning");
    CHECK(g[1].title == "diff-keys: dtype mismatch");
    CHECK(g[1].message == "b: float16 vs float32 in the reference");
    g = github_annotations(diff_keys(c, r, {{}, true}));
    REQUIRE(g.size() == 2);
    CHECK(g[1].level == "error");
}

TEST_CASE("diff-keys: keys grouped by module for people") {
    using V = std::vector<std::string>;
    CHECK(grouped_keys({}).empty());
    CHECK(grouped_keys(V{"w", "b"}) == V{"w", "b"});  // keys of no module stay as they are
    CHECK(grouped_keys(V{"bn2.weight", "bn2.bias", "bn2.running_mean", "bn2.running_var", "bn2.num_batches_tracked", "head.weight"}) ==
          V{"bn2 (5 keys: weight, bias, running_mean, running_var, num_batches_tracked)", "head.weight"});
    // Modules numbered in a row with the same keys are one line; a gap, other keys or a leading
    // zero start another.
    CHECK(grouped_keys(V{"layers.9.weight", "layers.9.bias", "layers.10.weight", "layers.10.bias", "layers.11.weight",
                         "layers.11.bias", "layers.13.weight", "layers.13.bias", "layers.14.weight"}) ==
          V{"layers.9–11 (2 keys each: weight, bias)", "layers.13 (2 keys: weight, bias)", "layers.14.weight"});
    CHECK(grouped_keys(V{"h.0.w", "h.1.w", "h.2.w"}) == V{"h.0–2.w"});
    CHECK(grouped_keys(V{"h.01.w", "h.02.w"}) == V{"h.01.w", "h.02.w"});
    CHECK(grouped_keys(V{"a.x", "a.y", "a.z", "a.u", "a.v", "a.t"}) == V{"a (6 keys: x, y, z, u, v, …)"});
}
