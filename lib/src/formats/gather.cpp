// Merged records (a sharded folder's merged view, RecordInfo::pieces): gathered piece by piece
// from their files into pooled buffers. Private to lib/: Checkpoint::record_data calls it.
#include "formats/gather.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include <unistd.h>

#include "ckpt/dtype.hpp"
#include "ckpt/error.hpp"
#include "io/mapped_file.hpp"
#include "base/huge_pages.hpp"

namespace ckpt::detail {

namespace {


// Buffers for merged records, kept per thread and used again once no RecordData holds them: a
// fresh 64 MiB buffer costs its page faults every time (on the bench VM more than the copy), and a
// merge gathers one tensor after another.
struct GatherBuffer {
    uint8_t* data = nullptr;
    size_t capacity = 0;
    ~GatherBuffer() { std::free(data); }
};

std::shared_ptr<GatherBuffer> gather_buffer(uint64_t size) {
    thread_local std::vector<std::shared_ptr<GatherBuffer>> pool;
    constexpr size_t k_pool = 4;
    for (auto& b : pool)
        if (b.use_count() == 1 && b->capacity >= size) return b;
    std::shared_ptr<GatherBuffer> b;
    for (auto& p : pool)
        if (p.use_count() == 1) b = p;  // free but too small: grown
    if (!b) {
        b = std::make_shared<GatherBuffer>();
        if (pool.size() < k_pool) pool.push_back(b);
    }
    std::free(b->data);
    size_t cap = std::max<size_t>((size + k_huge_page - 1) & ~(k_huge_page - 1), k_huge_page);
    b->data = static_cast<uint8_t*>(std::aligned_alloc(k_huge_page, cap));
    if (!b->data) throw std::bad_alloc();
    b->capacity = cap;
    advise_huge_pages(b->data, cap);
    return b;
}

// Reads `n` bytes at `offset` of `f` into `out` (pread: from the page cache straight into the
// buffer, no mapping faulted in); a short read is a truncated file.
void read_at(const MappedFile& f, uint64_t offset, uint64_t n, uint8_t* out, std::string_view what) {
    while (n) {
        ssize_t got = ::pread(f.fd(), out, std::min<uint64_t>(n, 1u << 30), static_cast<off_t>(offset));
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0)
            throw Error(ErrorKind::corrupt, f.path(),
                        "bytes " + std::to_string(offset) + "+" + std::to_string(n) + " of " + std::string(what) + " lie past the end of the file (" +
                            std::to_string(f.size()) + " bytes): truncated?");
        out += got;
        offset += static_cast<uint64_t>(got);
        n -= static_cast<uint64_t>(got);
    }
}

}  // namespace

namespace {

// The pieces of `r` in order through `buf` (`cap` bytes): sink(bytes) each time the buffer is full,
// and once more with the rest. A cast piece is read and converted a buffer's worth at a time.
void pass_pieces(const RecordInfo& r, uint8_t* buf, uint64_t cap, const std::function<void(ByteView)>& sink) {
    uint64_t at = 0, fill = 0;  // at: the record's bytes made so far; fill: those in buf
    auto flush = [&] {
        if (fill) sink({buf, fill});
        fill = 0;
    };
    std::vector<uint8_t> scratch;
    for (const RecordPiece& p : r.pieces) {
        const MappedFile& f = *p.file;
        bool cast = p.from != p.to && p.from != DType::untyped;
        uint64_t fs = cast ? dtype_size(p.from) : 1, ts = cast ? dtype_size(p.to) : 1;
        uint64_t n = p.length / fs, wrote = n * ts;
        if (p.offset > f.size() || p.length > f.size() - p.offset)
            throw Error(ErrorKind::corrupt, f.path(),
                        "bytes " + std::to_string(p.offset) + "+" + std::to_string(p.length) + " of " + std::string(r.name) +
                            " lie past the end of the file (" + std::to_string(f.size()) + " bytes): truncated?");
        if (at + wrote > r.size)
            throw Error(ErrorKind::corrupt, f.path(), "the pieces of " + std::string(r.name) + " hold more than its " + std::to_string(r.size) + " bytes");
        for (uint64_t done = 0; done < n;) {  // elements (bytes when not cast)
            if (cap - fill < ts) flush();
            uint64_t m = std::min(n - done, (cap - fill) / ts);
            if (!cast) {
                read_at(f, p.offset + done, m, buf + fill, r.name);
            } else {
                scratch.resize(m * fs);
                read_at(f, p.offset + done * fs, m * fs, scratch.data(), r.name);
                if (!convert_elements(p.from, p.to, scratch.data(), m, buf + fill))
                    throw Error(ErrorKind::unsupported, f.path(),
                                std::string("cannot convert ") + std::string(dtype_name(p.from)) + " to " + std::string(dtype_name(p.to)));
            }
            fill += m * ts;
            done += m;
        }
        at += wrote;
    }
    if (at != r.size)
        throw Error(ErrorKind::corrupt, std::string(r.name), "its pieces hold " + std::to_string(at) + " of its " + std::to_string(r.size) + " bytes");
    flush();
}

}  // namespace

// A merged record: its pieces read from their files one after the other into one buffer (a
// tensor's worth of memory, whatever the checkpoint's size), converted where a piece says so.
RecordData gather(const RecordInfo& r) {
    std::shared_ptr<GatherBuffer> buf = gather_buffer(r.size);
    pass_pieces(r, buf->data, r.size, [](ByteView) {});
    ByteView view{buf->data, r.size};
    return RecordData(std::shared_ptr<const void>(buf, buf->data), view);
}

void gather_runs(const RecordInfo& r, const std::function<void(ByteView)>& sink) {
    std::shared_ptr<GatherBuffer> buf = gather_buffer(std::min(r.size, k_run));
    pass_pieces(r, buf->data, std::min(r.size, k_run), sink);
}

}  // namespace ckpt::detail
