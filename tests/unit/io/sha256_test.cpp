#include <catch2/catch.hpp>

#include <string>

#include "io/sha256.hpp"

using namespace ckpt;

namespace {
std::string digest(const std::string& s, size_t step) {
    Sha256 h;
    for (size_t at = 0; at < s.size(); at += step)
        h.update(reinterpret_cast<const uint8_t*>(s.data()) + at, std::min(step, s.size() - at));
    return h.hex();
}
}  // namespace

TEST_CASE("SHA-256 gives FIPS 180-4's digests, however the bytes are fed") {
    for (size_t step : {1, 3, 63, 64, 65, 1000}) {
        CHECK(digest("", step) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        CHECK(digest("abc", step) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        CHECK(digest("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", step) ==
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    }
    CHECK(digest(std::string(1000000, 'a'), 4096) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}
