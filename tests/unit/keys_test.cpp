#include <catch2/catch.hpp>

#include "ckpt/keys.hpp"

using namespace ckpt;

TEST_CASE("wrapper_prefix strips module. and _orig_mod. in any order while all keys have them") {
    CHECK(wrapper_prefix({"module.a", "module.b.c"}) == "module.");
    CHECK(wrapper_prefix({"_orig_mod.module.a", "_orig_mod.module.b"}) == "_orig_mod.module.");
    CHECK(wrapper_prefix({"module._orig_mod.a", "module._orig_mod.b"}) == "module._orig_mod.");
    CHECK(wrapper_prefix({"module.a", "b"}) == "");
    CHECK(wrapper_prefix({}) == "");
    CHECK(wrapper_prefix({"modules.a"}) == "");
}

TEST_CASE("common_leading_component") {
    CHECK(common_leading_component({"model.a", "model.b"}) == "model.");
    CHECK(common_leading_component({"model.a", "head.b"}) == "");
    CHECK(common_leading_component({"model.a"}) == "");
}

TEST_CASE("glob_match") {
    CHECK(glob_match("encoder.*", "encoder.0.weight"));
    CHECK_FALSE(glob_match("encoder.*", "decoder.0.weight"));
    CHECK(glob_match("*.weight", "a.b.weight"));
    CHECK(glob_match("layer?.w", "layer1.w"));
    CHECK(glob_match("layer[0-3].w", "layer2.w"));
    CHECK_FALSE(glob_match("layer[!0-3].w", "layer2.w"));
    CHECK(glob_match("a[b", "a[b"));
    CHECK(glob_match("*", ""));
    CHECK_FALSE(glob_match("?", ""));
}
