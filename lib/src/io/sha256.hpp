// SHA-256 (FIPS 180-4), for the digests other tools write beside a checkpoint (Megatron's
// integrity.json). Private to the library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ckpt {

class Sha256 {
public:
    Sha256();
    void update(const uint8_t* data, size_t n);
    std::string hex();  // the digest as 64 lowercase hex digits; the object is spent

private:
    void block(const uint8_t* p);
    uint32_t m_h[8];
    uint8_t m_buf[64];
    size_t m_fill = 0;
    uint64_t m_bytes = 0;
};

// The SHA-256 of a file's bytes, read in 1 MiB runs (pread, nothing mapped); Error(io) naming it.
std::string sha256_file(const std::string& path, uint64_t& bytes_read);

}  // namespace ckpt
