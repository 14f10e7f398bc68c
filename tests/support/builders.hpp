// Byte-by-byte builders for test inputs: pickles opcode by opcode, zips record by record.
// Hostile inputs are made from these, so every corruption is visible in the test that makes it.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace testing {

using Bytes = std::string;

inline void put_u16(Bytes& b, uint16_t v) { b += char(v & 0xff); b += char(v >> 8); }
inline void put_u32(Bytes& b, uint32_t v) { for (int i = 0; i < 4; ++i) b += char((v >> (8 * i)) & 0xff); }
inline void put_u64(Bytes& b, uint64_t v) { for (int i = 0; i < 8; ++i) b += char((v >> (8 * i)) & 0xff); }

// A pickle, written opcode by opcode (Lib/pickletools.py names).
class PickleBuilder {
public:
    PickleBuilder& proto(int p = 2) { m_b += '\x80'; m_b += char(p); return *this; }
    PickleBuilder& op(char c) { m_b += c; return *this; }
    PickleBuilder& raw(const Bytes& bytes) { m_b += bytes; return *this; }
    PickleBuilder& global(const std::string& module, const std::string& name) {
        m_b += 'c'; m_b += module; m_b += '\n'; m_b += name; m_b += '\n'; return *this;
    }
    PickleBuilder& str(const std::string& s) { m_b += 'X'; put_u32(m_b, uint32_t(s.size())); m_b += s; return *this; }
    PickleBuilder& short_str(const std::string& s) { m_b += '\x8c'; m_b += char(s.size()); m_b += s; return *this; }
    PickleBuilder& integer(int64_t v) {
        if (v >= 0 && v < 256) { m_b += 'K'; m_b += char(v); }
        else if (v >= INT32_MIN && v <= INT32_MAX) { m_b += 'J'; put_u32(m_b, uint32_t(int32_t(v))); }
        else { m_b += '\x8a'; m_b += char(8); put_u64(m_b, uint64_t(v)); }
        return *this;
    }
    PickleBuilder& mark() { return op('('); }
    PickleBuilder& tuple() { return op('t'); }
    PickleBuilder& empty_tuple() { return op(')'); }
    PickleBuilder& empty_dict() { return op('}'); }
    PickleBuilder& empty_list() { return op(']'); }
    PickleBuilder& reduce() { return op('R'); }
    PickleBuilder& setitem() { return op('s'); }
    PickleBuilder& setitems() { return op('u'); }
    PickleBuilder& binput(uint8_t i) { m_b += 'q'; m_b += char(i); return *this; }
    PickleBuilder& binget(uint8_t i) { m_b += 'h'; m_b += char(i); return *this; }
    PickleBuilder& newfalse() { return op('\x89'); }
    PickleBuilder& stop() { return op('.'); }
    // ('storage', torch.<cls>, key, 'cpu', numel) BINPERSID; after legacy(), the legacy format's
    // 6-tuple with a None view_metadata.
    PickleBuilder& storage(const std::string& cls, const std::string& key, int64_t numel) {
        mark().str("storage").global("torch", cls).str(key).str("cpu").integer(numel);
        if (m_legacy) op('N');
        return tuple().op('Q');
    }
    PickleBuilder& legacy() { m_legacy = true; return *this; }
    // _rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict())
    PickleBuilder& tensor(const std::string& cls, const std::string& key, int64_t numel, int64_t offset,
                          const std::vector<int64_t>& shape, const std::vector<int64_t>& stride) {
        global("torch._utils", "_rebuild_tensor_v2");
        mark();
        storage(cls, key, numel);
        integer(offset);
        mark(); for (auto s : shape) integer(s); tuple();
        mark(); for (auto s : stride) integer(s); tuple();
        newfalse();
        global("collections", "OrderedDict").empty_tuple().reduce();
        tuple();
        return reduce();
    }
    const Bytes& bytes() const { return m_b; }

private:
    Bytes m_b;
    bool m_legacy = false;
};

// A zip written the way torch.save writes one: STORED records, data aligned to 64 bytes through an
// "FB" extra field, CRC-32 filled in.
class ZipBuilder {
public:
    struct Record { std::string name; Bytes data; bool deflate = false; };
    ZipBuilder& add(const std::string& name, const Bytes& data, bool deflate = false) {
        m_records.push_back({name, data, deflate});
        return *this;
    }
    // zip64: write every size and offset through the ZIP64 extra field and the zip64 end records,
    // as a writer does past 4 GiB, so the reader's ZIP64 paths run on a small file.
    Bytes build(bool zip64 = false) const {
        Bytes out, central;
        for (const auto& r : m_records) {
            uint32_t crc = crc32(0, reinterpret_cast<const Bytef*>(r.data.data()), uInt(r.data.size()));
            Bytes payload = r.deflate ? deflate_raw(r.data) : r.data;
            uint32_t offset = uint32_t(out.size());
            Bytes extra;
            if (!r.deflate) {
                size_t header_end = out.size() + 30 + r.name.size() + 4;
                size_t padding = (64 - header_end % 64) % 64;
                put_u16(extra, 0x4246);  // "FB"
                put_u16(extra, uint16_t(padding));
                extra += Bytes(padding, 'Z');
            }
            put_u32(out, 0x04034b50); put_u16(out, 20); put_u16(out, 0); put_u16(out, r.deflate ? 8 : 0);
            put_u16(out, 0); put_u16(out, 0); put_u32(out, crc);
            put_u32(out, uint32_t(payload.size())); put_u32(out, uint32_t(r.data.size()));
            put_u16(out, uint16_t(r.name.size())); put_u16(out, uint16_t(extra.size()));
            out += r.name; out += extra; out += payload;

            put_u32(central, 0x02014b50); put_u16(central, 45); put_u16(central, 45); put_u16(central, 0);
            put_u16(central, r.deflate ? 8 : 0); put_u16(central, 0); put_u16(central, 0); put_u32(central, crc);
            put_u32(central, zip64 ? 0xffffffffu : uint32_t(payload.size()));
            put_u32(central, zip64 ? 0xffffffffu : uint32_t(r.data.size()));
            put_u16(central, uint16_t(r.name.size())); put_u16(central, zip64 ? 28 : 0); put_u16(central, 0);
            put_u16(central, 0); put_u16(central, 0); put_u32(central, 0);
            put_u32(central, zip64 ? 0xffffffffu : offset);
            central += r.name;
            if (zip64) {
                put_u16(central, 0x0001); put_u16(central, 24);
                put_u64(central, r.data.size()); put_u64(central, payload.size()); put_u64(central, offset);
            }
        }
        uint32_t cd_offset = uint32_t(out.size());
        out += central;
        if (zip64) {
            uint64_t eocd64 = out.size();
            put_u32(out, 0x06064b50); put_u64(out, 44); put_u16(out, 45); put_u16(out, 45);
            put_u32(out, 0); put_u32(out, 0); put_u64(out, m_records.size()); put_u64(out, m_records.size());
            put_u64(out, central.size()); put_u64(out, cd_offset);
            put_u32(out, 0x07064b50); put_u32(out, 0); put_u64(out, eocd64); put_u32(out, 1);
        }
        put_u32(out, 0x06054b50); put_u16(out, 0); put_u16(out, 0);
        put_u16(out, zip64 ? 0xffff : uint16_t(m_records.size()));
        put_u16(out, zip64 ? 0xffff : uint16_t(m_records.size()));
        put_u32(out, zip64 ? 0xffffffffu : uint32_t(central.size()));
        put_u32(out, zip64 ? 0xffffffffu : cd_offset); put_u16(out, 0);
        return out;
    }
    // DEFLATE, raw as a zip record holds it (window_bits -15), or zlib (15) or gzip (31) wrapped.
    static Bytes deflate_raw(const Bytes& in, int window_bits = -MAX_WBITS) {
        z_stream zs{};
        deflateInit2(&zs, 9, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY);
        Bytes out(deflateBound(&zs, uLong(in.size())), '\0');
        zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
        zs.avail_in = uInt(in.size());
        zs.next_out = reinterpret_cast<Bytef*>(out.data());
        zs.avail_out = uInt(out.size());
        deflate(&zs, Z_FINISH);
        out.resize(zs.total_out);
        deflateEnd(&zs);
        return out;
    }

private:
    std::vector<Record> m_records;
};

// A torch-style checkpoint: root/data.pkl, root/data/<key>..., root/version.
inline Bytes torch_zip(const std::string& root, const Bytes& pickle,
                       const std::vector<std::pair<std::string, Bytes>>& storages) {
    ZipBuilder z;
    z.add(root + "/data.pkl", pickle);
    for (const auto& [key, data] : storages) z.add(root + "/data/" + key, data);
    z.add(root + "/version", "3\n");
    return z.build();
}

// A file in the legacy format (torch < 1.6): the magic number, protocol `version`, sys_info, `pickle`
// (its persistent ids built after PickleBuilder::legacy()), the storage key list, then for each
// storage its int64 element count and bytes, both in the byte order `little` says.
struct LegacyStorage {
    std::string key;
    int64_t count;
    Bytes data;
};
inline Bytes legacy_file(const Bytes& pickle, const std::vector<LegacyStorage>& storages, bool little = true,
                         int64_t version = 1001) {
    Bytes out("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.", 15);
    out += PickleBuilder().proto(2).integer(version).stop().bytes();
    PickleBuilder info;
    info.proto(2).empty_dict().mark().str("protocol_version").integer(1001).str("little_endian").op(little ? '\x88' : '\x89');
    info.str("type_sizes").empty_dict().mark().str("short").integer(2).str("int").integer(4).str("long").integer(8).setitems();
    out += info.setitems().stop().bytes();
    out += pickle;
    PickleBuilder keys;
    keys.proto(2).empty_list().mark();
    for (const auto& s : storages) keys.str(s.key);
    out += keys.op('e').stop().bytes();
    for (const auto& s : storages) {
        for (int b = 0; b < 8; ++b) out += char((uint64_t(s.count) >> (8 * (little ? b : 7 - b))) & 0xff);
        out += s.data;
    }
    return out;
}

inline void write_file(const std::string& path, const Bytes& bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), std::streamsize(bytes.size()));
}

// A fresh scratch directory under the build tree, removed by the OS's tmp cleaning, not by us.
std::string scratch_dir(const std::string& name);

}  // namespace testing
