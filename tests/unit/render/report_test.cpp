#include <catch2/catch.hpp>

#include <sstream>

#include "ckpt/report.hpp"

using namespace ckpt;

namespace {
// What GitHub's runner does to a value (the inverse of the toolkit's escaping), for round trips.
std::string unescape(std::string s) {
    for (const auto& [from, to] : {std::pair{"%0D", "\r"}, std::pair{"%0A", "\n"}, std::pair{"%3A", ":"},
                                   std::pair{"%2C", ","}, std::pair{"%25", "%"}}) {
        std::string out;
        for (size_t i = 0; i < s.size();) {
            if (s.compare(i, 3, from) == 0) {
                out += to;
                i += 3;
            } else {
                out += s[i++];
            }
        }
        s = out;
    }
    return s;
}

std::vector<std::string> lines(const std::string& s) {
    std::vector<std::string> out;
    std::istringstream in(s);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
}
}  // namespace

TEST_CASE("shown: what a terminal would obey is escaped, everything else kept") {
    CHECK(shown("conv1.weight") == "conv1.weight");
    CHECK(shown("layers.0.w×2 é ✓") == "layers.0.w×2 é ✓");  // UTF-8 text is text
    CHECK(shown("a\x1b[31mred\x1b]0;title\x07") == "a\\e[31mred\\e]0;title\\x07");
    CHECK(shown("x\ny\rz\t") == "x\\ny\\rz\\t");
    CHECK(shown(std::string("nul\0!", 5)) == "nul\\x00!");
    CHECK(shown("del\x7f") == "del\\x7f");
    CHECK(shown("c1\xc2\x9b" "31m") == "c1\\u009b31m");           // U+009B, the 8-bit CSI
    CHECK(shown("ab\xe2\x80\xae" "cd") == "ab\\u202ecd");           // RIGHT-TO-LEFT OVERRIDE
    CHECK(shown("bad\xff\xc3") == "bad\\xff\\xc3");                 // not UTF-8: a stray byte, a cut sequence
    CHECK(shown("\xc0\xaf") == "\\xc0\\xaf");                       // an overlong '/'
    CHECK(shown("\xed\xa0\x80") == "\\xed\\xa0\\x80");              // a surrogate
}

TEST_CASE("shell_quote: a word with control characters is $'…', printable and the same word") {
    CHECK(shell_quote("model.pth") == "model.pth");
    CHECK(shell_quote("my model.pth") == "'my model.pth'");
    CHECK(shell_quote("a\nb'c\\") == "$'a\\x0ab\\'c\\\\'");
}

TEST_CASE("github_escape: data and property values as actions/toolkit escapes them") {
    CHECK(github_escape("", false) == "");
    CHECK(github_escape("conv1.weight", true) == "conv1.weight");
    CHECK(github_escape("a%b\r\nc:d,e", false) == "a%25b%0D%0Ac:d,e");
    CHECK(github_escape("a%b\r\nc:d,e", true) == "a%25b%0D%0Ac%3Ad%2Ce");
    CHECK(github_escape("k\x1b[2J\xe2\x80\xae\n", false) == "k\\e[2J\\u202e%0A");
    // An input that already looks escaped is escaped again, so it comes back as it was.
    CHECK(github_escape("%0A%25", false) == "%250A%2525");
    CHECK(github_escape("::error::", false) == "::error::");
    CHECK(github_escape("::error::", true) == "%3A%3Aerror%3A%3A");
    // UTF-8 text ("×") passes unchanged; a byte that is no UTF-8 (a lone 0xff) is shown as \xff.
    CHECK(github_escape("64×3 \xff", true) == "64×3 \\xff");
    for (const std::string nasty : {"layer,1:w%eight\n", "%%0A\r\n,,::", "\n", "%", "a\rb", "model.x%3Ay"}) {
        INFO(nasty);
        std::string data = github_escape(nasty, false), prop = github_escape(nasty, true);
        CHECK(data.find_first_of("\r\n") == std::string::npos);
        CHECK(prop.find_first_of("\r\n:,") == std::string::npos);
        CHECK(unescape(data) == nasty);
        CHECK(unescape(prop) == nasty);
    }
}

TEST_CASE("github_command: ::level file=F,title=T::MESSAGE, empty properties left out") {
    // The title's ':' is a property's: escaped; the message's stays.
    CHECK(github_command({"error", "ckpt.pth", "diff-keys: missing key", "fc.weight: in ref.pth, not in ckpt.pth"}) ==
          "::error file=ckpt.pth,title=diff-keys%3A missing key::fc.weight: in ref.pth, not in ckpt.pth");
    CHECK(github_command({"warning", "dir,1/a:b%.pth", "", "k,e:y%\nx"}) ==
          "::warning file=dir%2C1/a%3Ab%25.pth::k,e:y%25%0Ax");
    CHECK(github_command({"notice", "", "", "plain"}) == "::notice::plain");
    CHECK(github_command({"error", "", "t", "m"}) == "::error title=t::m");
}

TEST_CASE("render_github: every annotation up to the cap, then one warning saying how many more, then a summary") {
    std::vector<Annotation> a;
    std::ostringstream none;
    render_github(a, "verify", none);
    CHECK(none.str() == "ckpt-tool verify: no findings\n");

    a.push_back({"notice", "f.pth", "diff-keys: prefix fix", "stripping \"module.\""});
    for (int i = 0; i < 3; ++i) a.push_back({"error", "f.pth", "diff-keys: missing key", "k" + std::to_string(i)});
    a.push_back({"warning", "f.pth", "diff-keys: dtype mismatch", "d"});
    std::ostringstream few;
    render_github(a, "diff-keys", few);
    auto l = lines(few.str());
    REQUIRE(l.size() == 6);
    CHECK(l[0] == "::notice file=f.pth,title=diff-keys%3A prefix fix::stripping \"module.\"");
    CHECK(l[3] == "::error file=f.pth,title=diff-keys%3A missing key::k2");
    CHECK(l[5] == "ckpt-tool diff-keys: 3 errors, 1 warning");

    // 60 findings, cap 50: 50 annotations, the warning for the 10 left out, the summary.
    std::vector<Annotation> many;
    for (int i = 0; i < 60; ++i) many.push_back({"error", "big.pth", "verify: NaN", "t" + std::to_string(i)});
    std::ostringstream capped;
    render_github(many, "verify", capped);
    l = lines(capped.str());
    REQUIRE(l.size() == 52);
    CHECK(l[49] == "::error file=big.pth,title=verify%3A NaN::t49");
    CHECK(l[50] == "::warning file=big.pth,title=ckpt-tool%3A more findings::10 more findings not annotated (at most 50 "
                   "annotations a run): run ckpt-tool verify with --json for all");
    CHECK(l[51] == "ckpt-tool verify: 60 errors, 0 warnings, 10 not annotated (--json lists all)");

    // Exactly at the cap: no warning. Left out from two files: the warning names none.
    many.resize(50);
    std::ostringstream exact;
    render_github(many, "verify", exact);
    CHECK(lines(exact.str()).size() == 51);
    many.push_back({"warning", "a.pth", "scan: unknown global", "x"});
    many.push_back({"warning", "b.pth", "scan: unknown global", "y"});
    std::ostringstream two;
    render_github(many, "scan", two);
    l = lines(two.str());
    REQUIRE(l.size() == 52);
    CHECK(l[50].rfind("::warning title=ckpt-tool%3A more findings::2 more findings not annotated", 0) == 0);
    CHECK(l[51] == "ckpt-tool scan: 50 errors, 2 warnings, 2 not annotated (--json lists all)");
}

TEST_CASE("write_json_streamed: the same text as dump(indent), rows handed over one at a time") {
    auto rows_of = [](int n) {
        nlohmann::json a = nlohmann::json::array();
        for (int i = 0; i < n; ++i)
            a.push_back({{"key", "layer." + std::to_string(i) + ".w\nx\"q"},
                         {"shape", {i, 2}},
                         {"nested", {{"empty", nlohmann::json::array()}, {"obj", nlohmann::json::object()}, {"v", i * 0.5}}}});
        return a;
    };
    for (int indent : {1, 2, 4})
        for (int n : {0, 1, 3, 2000}) {  // 2000 rows pass the 64 KiB a piece is sent at
            nlohmann::json full = {{"zeta", 1}, {"alpha", "a"}, {"tensors", rows_of(n)}, {"findings", rows_of(n / 2)}, {"m", {{"x", 1}}}};
            nlohmann::json head = full;
            head["tensors"] = nlohmann::json::array();
            head["findings"] = nlohmann::json::array();
            std::string got;
            size_t pieces = 0;
            ckpt::write_json_streamed(head, indent,
                                      {{"tensors", [&](const ckpt::JsonRowSink& row) { for (const auto& r : full["tensors"]) row(r); }},
                                       {"findings", [&](const ckpt::JsonRowSink& row) { for (const auto& r : full["findings"]) row(r); }}},
                                      [&](std::string_view s) { got += s; ++pieces; });
            CHECK(got == full.dump(indent) + "\n");
            if (n == 2000) CHECK(pieces > 1);
        }
    nlohmann::json no_array = {{"tensors", 1}};
    CHECK_THROWS_AS(ckpt::write_json_streamed(no_array, 2, {{"tensors", [](const ckpt::JsonRowSink&) {}}}, [](std::string_view) {}),
                    std::logic_error);
}
