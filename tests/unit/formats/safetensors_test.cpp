// The safetensors reader, rule by rule: every file here is built byte by byte, and each broken rule
// must be refused with its own message (and through the binary: exit 2, one line naming the file).
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.hpp"
#include "ckpt/error.hpp"
#include "ckpt/fingerprint.hpp"
#include "formats/safetensors.hpp"
#include "support/builders.hpp"
#include "support/run.hpp"

using namespace ckpt;

namespace {

std::string file_of(std::string header, const std::string& data, bool pad = true) {
    if (pad) header.append((8 - header.size() % 8) % 8, ' ');
    std::string out;
    for (int i = 0; i < 8; ++i) out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
    return out + header + data;
}

ByteView view(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

}  // namespace

TEST_CASE("safetensors: a well-formed file reads with its metadata, in header order") {
    std::string f = file_of(R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                            R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[24,28]},"e":{"dtype":"I64","shape":[0],"data_offsets":[28,28]}})",
                            std::string(28, '\x01'));
    SafetensorsHeader h = read_safetensors(view(f));
    REQUIRE(h.tensors.size() == 3);
    CHECK(h.tensors[0].name == "w");
    CHECK(h.tensors[1].dtype == DType::bfloat16);
    CHECK(h.tensors[2].numel == 0);
    CHECK(h.metadata == std::vector<std::pair<std::string, std::string>>{{"format", "pt"}});
    CHECK(h.tensors[0].begin == 8 + h.header_size);
}

TEST_CASE("safetensors: header order and metadata order are the file's, nested objects and all") {
    // Names out of alphabetical order, metadata keys too, a metadata object that is not first, and
    // a nested value in a tensor entry that a reader must skip (its keys are not names).
    std::string f = file_of(R"({"z":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":{"a":1}},)"
                            R"("__metadata__":{"zeta":"1","alpha":"2","mid":"3"},)"
                            R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},"m":{"dtype":"F32","shape":[],"data_offsets":[8,12]}})",
                            std::string(12, '\0'));
    SafetensorsHeader h = read_safetensors(view(f));
    REQUIRE(h.tensors.size() == 3);
    CHECK(h.tensors[0].name == "z");
    CHECK(h.tensors[1].name == "a");
    CHECK(h.tensors[2].name == "m");
    REQUIRE(h.metadata.size() == 3);
    CHECK(h.metadata[0].first == "zeta");
    CHECK(h.metadata[1].first == "alpha");
    CHECK(h.metadata[2] == std::make_pair(std::string("mid"), std::string("3")));
}

TEST_CASE("safetensors: every broken rule is refused with its own message") {
    const std::string t24 = R"("w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]})";
    struct Case {
        const char* name;
        std::string file;
        const char* message;
    };
    std::string huge;
    for (int i = 0; i < 8; ++i) huge += static_cast<char>((200'000'000ull >> (8 * i)) & 0xff);
    huge += "{}";
    std::string past;
    for (int i = 0; i < 8; ++i) past += static_cast<char>((5000ull >> (8 * i)) & 0xff);
    past += "{\"w\":1}";
    const Case cases[] = {
        {"header over 100 MB", huge, "over the format's limit"},
        {"header past the end", past, "runs past the end of the file"},
        {"invalid JSON", file_of("{\"w\":", ""), "not valid JSON"},
        {"not an object", file_of("[1,2]", "", true), "not a JSON object"},
        {"duplicate name", file_of("{" + t24 + "," + t24 + "}", std::string(48, '\0')), "appears twice"},
        {"__metadata__ as a tensor", file_of(R"({"__metadata__":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0')), "is not a string"},
        {"unknown dtype", file_of(R"({"w":{"dtype":"F7","shape":[1],"data_offsets":[0,1]}})", std::string(1, '\0')), "unknown dtype"},
        {"negative dim", file_of(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", std::string(4, '\0')), "non-negative integers"},
        {"size mismatch", file_of(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", std::string(20, '\0')), "needs 24"},
        {"overflowing shape", file_of(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,4]}})", std::string(4, '\0')), "overflows"},
        {"gap", file_of(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}})", std::string(6, '\0')), "gap in the data buffer"},
        {"overlap", file_of(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})", std::string(4, '\0')), "overlaps"},
        {"bytes after the buffer", file_of("{" + t24 + "}", std::string(30, '\0')), "does not end at the end of the file"},
        {"truncated data", file_of("{" + t24 + "}", std::string(10, '\0')), "run past the end of the file"},
        // Found by fuzz_safetensors: nlohmann's out_of_range escaped the reader (not a parse_error).
        {"number past a double's range", file_of(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4e999]}})", std::string(4, '\0')), "number out of range"},
        {"no data_offsets", file_of(R"({"w":{"dtype":"F32","shape":[1]}})", std::string(4, '\0')), "data_offsets"},
    };
    std::string dir = testing::scratch_dir("safetensors_test");
    int n = 0;
    for (const Case& c : cases) {
        INFO(c.name);
        CHECK_THROWS_WITH(read_safetensors(view(c.file)), Catch::Contains(c.message));
        // Through the binary too (the ones that still sniff as safetensors: a header that starts with '{').
        std::string path = dir + "/case" + std::to_string(n++) + ".safetensors";
        testing::write_file(path, c.file);
        testing::RunResult r = testing::run_tool({"inspect", path});
        CHECK(r.signal == 0);
        CHECK(r.exit_code == 2);
        CHECK(r.out.empty());
        CHECK(r.err.find(path) != std::string::npos);
        CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    }
}

TEST_CASE("JSON inputs with a number past a double's range are refused naming the file") {
    // The same nlohmann exception in the other JSON readers: a diff-keys manifest, a verify reference.
    std::string dir = testing::scratch_dir("json_range_test");
    std::string manifest = dir + "/keys.json";
    testing::write_file(manifest, R"({"keys": [{"key": "w", "shape": [1e999]}]})");
    const std::string sample = std::string(CKPT_SOURCE_DIR) + "/data/training.pth";
    const std::vector<std::vector<std::string>> runs = {{"diff-keys", sample, manifest}, {"verify", sample, manifest}};
    for (const std::vector<std::string>& a : runs) {
        testing::RunResult r = testing::run_tool(a);
        INFO(a[0] << " stdout: " << r.out << "\nstderr: " << r.err);
        CHECK(r.signal == 0);
        CHECK(r.exit_code == 2);
        CHECK(r.err.find(manifest) != std::string::npos);
        CHECK(r.err.find("number out of range") != std::string::npos);
        CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    }
}

TEST_CASE("Optional string fields of another type in a fingerprint are ignored, not an escaped type_error") {
    // fuzz_json: {"command": "fingerprint", "file": 61, …} threw nlohmann's type_error out of
    // fingerprint_from_json. "file", "scope", "command" and a row's "status" are informational.
    std::string dir = testing::scratch_dir("json_types_test");
    const std::string sample = std::string(CKPT_SOURCE_DIR) + "/data/training.pth";
    std::string fp = dir + "/fp.json";
    testing::RunResult w = testing::run_tool({"verify", sample, "--write-fingerprint", fp});
    REQUIRE(w.exit_code == 0);
    std::ifstream in(fp);
    nlohmann::json j = nlohmann::json::parse(in);
    REQUIRE(j["tensors"].size() > 0);
    j["file"] = 61;
    j["scope"] = nlohmann::json::array();
    j["tensors"][0]["status"] = 5;
    std::string odd = dir + "/odd.json";
    testing::write_file(odd, j.dump());
    for (const char* cmd : {"verify", "diff-keys"}) {
        testing::RunResult r = testing::run_tool({cmd, sample, odd});
        INFO(cmd << " stdout: " << r.out << "\nstderr: " << r.err);
        CHECK(r.signal == 0);
        CHECK(r.exit_code == 0);
        CHECK(r.err.find("type_error") == std::string::npos);
    }
    ckpt::Fingerprint f = ckpt::fingerprint_from_json(odd, j);
    CHECK(f.file == odd);
    CHECK(f.scope == "state_dict");
    CHECK(f.tensors.size() == j["tensors"].size());
}
