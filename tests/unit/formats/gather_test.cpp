// A merged record written run by run (merge's bounded memory): gather_runs hands over the same bytes
// as gather, in runs of k_run, converting cast pieces across run boundaries; StatsStream over the
// runs gives the whole tensor's statistics; ZipWriter::add_streamed puts the CRC-32 it learns last in
// both headers, whether the local header is still buffered or already on disk.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "ckpt/atomic_file.hpp"
#include "ckpt/checkpoint.hpp"
#include "ckpt/error.hpp"
#include "ckpt/fingerprint.hpp"
#include "formats/gather.hpp"
#include "io/mapped_file.hpp"
#include "io/zip.hpp"
#include "io/zip_writer.hpp"
#include "stats/tensor_stats.hpp"
#include "support/builders.hpp"

using namespace ckpt;

namespace {

float half_to_float_ref(uint16_t h) {  // float16 → float32 for the values this test writes (normal, exact)
    uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    uint32_t bits = exp == 0 ? sign << 31 : (sign << 31) | ((exp - 15 + 127) << 23) | (man << 13);
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

}  // namespace

TEST_CASE("gather: a merged record passes in bounded runs, byte for byte, casts across run boundaries") {
    // 10 Mi float16 elements cast to float32 (40 MiB), then 24 MiB + 4 bytes of float32 in two
    // untyped pieces (the first ending off any power of two): 64 MiB + 4 bytes in all, runs of 32 MiB,
    // 32 MiB and 4 bytes, the first boundary inside the cast piece, the second inside an untyped one.
    const uint64_t n16 = 10ull << 20, n32 = (24ull << 20) / 4 + 1;
    std::string data(n16 * 2 + n32 * 4, '\0');
    for (uint64_t i = 0; i < n16; ++i) {
        uint16_t h = static_cast<uint16_t>(0x3c00 + (i % 512));  // 1.0 … 1.5, normal
        std::memcpy(&data[i * 2], &h, 2);
    }
    for (uint64_t i = 0; i < n32; ++i) {
        float v = static_cast<float>(i % 1009) * 0.5f - 7.0f;
        std::memcpy(&data[n16 * 2 + i * 4], &v, 4);
    }
    std::string path = testing::scratch_dir("gather_runs") + "/pieces.bin";
    testing::write_file(path, data);
    MappedFile f(path);
    RecordInfo r;
    r.name = "decoder.big";
    uint64_t at32 = n16 * 2, cut = 10 * (1ull << 20) + 12;
    r.pieces.push_back({&f, 0, n16 * 2, DType::float16, DType::float32});
    r.pieces.push_back({&f, at32, cut});
    r.pieces.push_back({&f, at32 + cut, n32 * 4 - cut});
    r.size = n16 * 4 + n32 * 4;

    std::string want;
    for (uint64_t i = 0; i < n16; ++i) {
        uint16_t h;
        std::memcpy(&h, &data[i * 2], 2);
        float v = half_to_float_ref(h);
        want.append(reinterpret_cast<const char*>(&v), 4);
    }
    want.append(data, at32, n32 * 4);
    RecordData whole = detail::gather(r);
    REQUIRE(whole.view().size == r.size);
    CHECK(std::memcmp(whole.view().data, want.data(), want.size()) == 0);

    std::string got;
    std::vector<uint64_t> runs;
    detail::StatsStream aligned(DType::float32, nullptr, false);
    uint32_t crc = 0;
    detail::StatsStream with_crc(DType::float32, &crc, true);
    detail::gather_runs(r, [&](ByteView run) {
        runs.push_back(run.size);
        got.append(reinterpret_cast<const char*>(run.data), run.size);
        aligned.add(run);
        with_crc.add(run);
    });
    CHECK(runs == std::vector<uint64_t>{detail::k_run, detail::k_run, 4});
    CHECK(got == want);
    TensorStats expected = buffer_stats(DType::float32, whole.view(), r.size / 4);
    TensorStats s = aligned.finish();
    CHECK(s.hash == expected.hash);
    CHECK(s.count == expected.count);
    CHECK(*s.mean == *expected.mean);  // runs of whole 1,024-element chunks: the same sums in the same order
    CHECK(*s.std == *expected.std);
    CHECK(*s.max == *expected.max);
    CHECK(with_crc.finish().hash == expected.hash);
    CHECK(crc == crc32_of(whole.view()));

    // Parts that end inside an element (7 bytes at a time over the first 1 MiB, then the rest).
    detail::StatsStream odd(DType::float32, nullptr, false);
    const uint8_t* p = whole.view().data;
    uint64_t at = 0;
    for (; at + 7 <= (1u << 20); at += 7) odd.add({p + at, 7});
    odd.add({p + at, r.size - at});
    TensorStats o = odd.finish();
    CHECK(o.hash == expected.hash);
    CHECK(o.count == expected.count);
    CHECK(*o.mean == Approx(*expected.mean).epsilon(1e-12));
    detail::StatsStream cut_short(DType::float32, nullptr, true);
    cut_short.add({p, 6});
    CHECK_THROWS_AS(cut_short.finish(), Error);

    // A piece past the file's end (the file cut after it was opened): an Error naming it, no crash.
    RecordInfo past = r;
    past.pieces[2].offset += 8;
    CHECK_THROWS_AS(detail::gather_runs(past, [](ByteView) {}), Error);
    // Pieces that do not add up to the record.
    RecordInfo short_record = r;
    short_record.size += 4;
    CHECK_THROWS_AS(detail::gather_runs(short_record, [](ByteView) {}), Error);
}

TEST_CASE("zip writer: a streamed record's CRC-32 reaches the local header and the directory") {
    std::string dir = testing::scratch_dir("zip_streamed");
    std::string out = dir + "/out.zip";
    std::string small = "seventeen bytes!!", big(3u << 20, '\0');  // big: past the writer's 1 MiB buffer
    for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 7919) >> 5);
    auto crc_of = [](const std::string& s) { return crc32_of({reinterpret_cast<const uint8_t*>(s.data()), s.size()}); };
    {
        AtomicFile f(out);
        ZipWriter w(f.fd(), out);
        for (const std::string* s : {&small, &big})
            w.add_streamed(s == &small ? "r/data/0" : "r/data/1", s->size(), [&](auto&& write) {
                for (size_t at = 0; at < s->size(); at += 1000) write(s->data() + at, std::min<size_t>(1000, s->size() - at));
                return crc_of(*s);
            });
        w.finish();
        f.commit(false);
    }
    MappedFile m(out);
    ZipArchive z = ZipArchive::open(m.view());
    REQUIRE(z.entries().size() == 2);
    const std::string* want[] = {&small, &big};
    for (size_t i = 0; i < 2; ++i) {
        const ZipEntry& e = z.entries()[i];
        CHECK(e.crc32 == crc_of(*want[i]));
        CHECK(z.compute_crc32(e) == e.crc32);
        uint32_t local;
        std::memcpy(&local, m.view().data + e.local_header_offset + 14, 4);
        CHECK(local == e.crc32);
        CHECK(std::string(z.record_data(e).view().as_chars()) == *want[i]);
    }
}
