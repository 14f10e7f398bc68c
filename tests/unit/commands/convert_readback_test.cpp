// convert's read-back (verify_written): the written file opened again and every tensor's content hash
// compared with the source's. Each way an output can differ is caught, and said.
#include <catch2/catch.hpp>

#include <unistd.h>

#include "ckpt/error.hpp"
#include "commands/convert_detail.hpp"
#include "formats/safetensors.hpp"
#include "support/builders.hpp"

using namespace ckpt;

namespace {

// A safetensors file of float32 tensors of two elements each, by name.
std::string safetensors_of(const std::vector<std::pair<std::string, std::string>>& tensors) {
    SafetensorsHeaderWriter header(nullptr);
    std::string data;
    for (const auto& [name, bytes] : tensors) {
        header.add(name, DType::float32, Dims{2}, data.size(), data.size() + bytes.size());
        data += bytes;
    }
    return header.finish() + data;
}

// verify_written of `written` (as the output) against `source`: "" when it reads back equal, else
// the error's message.
std::string read_back(const std::string& dir, const std::string& source, const std::string& written) {
    testing::write_file(dir + "/in.safetensors", source);
    std::unique_ptr<Checkpoint> c = Checkpoint::open(dir + "/in.safetensors");
    FingerprintOptions hashes;
    hashes.hash_only = true;
    detail::SourceHashes hashed(*c, hashes, true);
    ConvertRequest rq;
    rq.output = dir + "/out.safetensors";
    ConvertReport r;
    r.format = "safetensors";
    AtomicFile out(rq.output);
    REQUIRE(::write(out.fd(), written.data(), written.size()) == static_cast<ssize_t>(written.size()));
    try {
        detail::verify_written(c.get(), rq, out, r, std::nullopt, hashed);
    } catch (const Error& e) {
        CHECK(e.kind() == ErrorKind::corrupt);
        CHECK(!r.verified);
        return e.what();
    }
    CHECK(r.verified);
    return "";
}

}  // namespace

TEST_CASE("convert's read-back: an equal output passes, and every difference is caught and named") {
    std::string dir = testing::scratch_dir("convert_readback");
    const std::string one("\0\0\x80\x3f\0\0\0\x40", 8), two("\0\0\x40\x40\0\0\x80\x40", 8);
    std::string source = safetensors_of({{"a", one}, {"b", two}});
    CHECK(read_back(dir, source, source) == "");
    std::string flipped = two;
    flipped[0] = '\x01';  // one bit of b
    CHECK_THAT(read_back(dir, source, safetensors_of({{"a", one}, {"b", flipped}})),
               Catch::Contains("does not read back as the input (b differs)"));
    CHECK_THAT(read_back(dir, source, safetensors_of({{"a", one}})),
               Catch::Contains("(tensor count 1, expected 2)"));
    CHECK_THAT(read_back(dir, source, safetensors_of({{"a", one}, {"c", two}})),
               Catch::Contains("(c is not in the input)"));
    // The count is said before a difference, as when the output's prints were all kept first.
    CHECK_THAT(read_back(dir, source, safetensors_of({{"a", two}, {"b", one}, {"c", one}})),
               Catch::Contains("(tensor count 3, expected 2)"));
    CHECK_THAT(read_back(dir, source, "not a safetensors file"), Catch::Contains("does not read back as the input"));
}
