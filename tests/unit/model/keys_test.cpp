#include <catch2/catch.hpp>

#include "model/keys.hpp"
#include "base/string_index.hpp"

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

TEST_CASE("StringIndex maps names to positions of a table that grows and moves") {
    std::vector<std::string> table;  // short names stay in the string (SSO): they move with it
    StringIndex index;
    auto name_of = [&](size_t pos) -> std::string_view { return table[pos]; };
    CHECK(index.find("absent", name_of) == StringIndex::npos);  // empty index
    for (int i = 0; i < 20000; ++i) {
        std::string name = i % 2 ? "layers." + std::to_string(i) + ".weight" : std::to_string(i);
        auto [pos, added] = index.insert(name, table.size(), name_of);
        CHECK(added);
        CHECK(pos == table.size());
        table.push_back(name);
    }
    CHECK(index.size() == 20000);
    bool all = true;
    for (size_t i = 0; i < table.size(); ++i) all = all && index.find(table[i], name_of) == i;
    CHECK(all);
    // A name again keeps its first position, as dict keys and zip records are checked.
    auto [pos, added] = index.insert("8", 99999, name_of);
    CHECK_FALSE(added);
    CHECK(pos == 8);
    CHECK(index.size() == 20000);
    CHECK(index.find("layers.2.weight", name_of) == StringIndex::npos);  // even numbers are bare
    CHECK(index.find("", name_of) == StringIndex::npos);
    CHECK(index.insert("", table.size(), name_of).second);  // the empty name is a name
    table.push_back("");
    CHECK(index.find("", name_of) == 20000);
}

TEST_CASE("DecimalIndex holds the small numbers written the canonical way") {
    CHECK(DecimalIndex::number("0") == 0u);
    CHECK(DecimalIndex::number("42") == 42u);
    CHECK(DecimalIndex::number("999999999") == 999999999u);
    // Not one number's canonical text: each would be another name than the number's.
    for (const char* s : {"", "00", "007", "-1", "+1", "1a", " 1", "1 ", "1.0", "1000000000", "0x1"}) {
        INFO(s);
        CHECK_FALSE(DecimalIndex::number(s));
    }
    DecimalIndex index(10);
    CHECK(index.covers(9));
    CHECK_FALSE(index.covers(10));
    CHECK(index.find(3) == DecimalIndex::npos);
    CHECK(index.find(10) == DecimalIndex::npos);  // not covered: not here
    CHECK(index.insert(3, 0) == std::make_pair(size_t{0}, true));
    CHECK(index.insert(0, 7) == std::make_pair(size_t{7}, true));
    CHECK(index.insert(3, 5) == std::make_pair(size_t{0}, false));  // the first stays
    CHECK(index.find(3) == 0);
    CHECK(index.find(0) == 7);
    CHECK_FALSE(DecimalIndex().covers(0));
}
