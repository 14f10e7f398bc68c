// The legacy format (torch < 1.6, or torch.save(..., _use_new_zipfile_serialization=False)): pickles
// (of any protocol torch.save was given) back to back — the magic number, the protocol version 1001, a sys_info dict (byte order and type
// sizes), the object itself (storages as persistent ids ('storage', class, key, location, numel,
// view_metadata)), the list of storage keys — then for each key in that order an int64 element count
// in the writer's byte order and the storage's raw bytes. Only the pickles and the 8-byte counts are
// read: the storages become records (byte ranges of the file), as a zip's are.
#include <algorithm>
#include <cstring>

#include "formats/format.hpp"
#include "pickle/pickle_ops.hpp"
#include "ckpt/bytes.hpp"
#include "ckpt/error.hpp"
#include "io/mapped_file.hpp"
#include "pickle/pickle.hpp"
#include "io/zip.hpp"
#include "formats/torch_hooks.hpp"

namespace ckpt {

namespace {

constexpr uint8_t k_magic[] = {0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};  // 0x1950a86a20f9469cfc6c, LE
constexpr int64_t k_protocol_version = 1001;

[[noreturn]] void corrupt(const std::string& what, uint64_t at) {
    throw Error(ErrorKind::corrupt, "", "legacy checkpoint: " + what, at);
}

}  // namespace

bool sniff_legacy(ByteView file) {
    // Protocol 0 and 1 (torch.save(..., pickle_protocol=1)) write the magic number as LONG text.
    constexpr std::string_view k_text_magic = "L119547037146038801333356L\n";
    if (file.size >= k_text_magic.size() && std::memcmp(file.data, k_text_magic.data(), k_text_magic.size()) == 0) return true;
    // PROTO 2..5, an optional FRAME, then LONG1 of the 10-byte magic number.
    if (file.size < 14 || !pickle_ops::proto_start(file, 2)) return false;
    uint64_t at = 2;
    if (file.data[at] == pickle_ops::FRAME) at += 9;
    return file.size >= at + 12 && file.data[at] == pickle_ops::LONG1 && file.data[at + 1] == 10 &&
           std::memcmp(file.data + at + 2, k_magic, sizeof k_magic) == 0;
}

void read_legacy(Checkpoint::Contents& c, const OpenOptions& options) {
    ByteView file = c.bytes();
    c.format = Format::legacy;
    uint64_t at = 0;
    PickleHooks plain;  // the header pickles hold plain data
    auto next = [&](const std::string& what, PickleHooks& hooks, PickleTrace* trace = nullptr) -> const Value* {
        if (at >= file.size) corrupt("the file ends before the " + what, at);
        ByteView rest = *file.sub(at, file.size - at);
        PickleResult r = run_pickle(rest, c.arena, hooks, what, at, options.pickle_limits, trace);
        at += r.end;
        if (what == "pickle") {
            c.protocol = r.protocol;
            c.pickle_opcodes = std::move(r.first_opcodes);
        }
        return r.root;
    };
    const Value* magic = next("magic number", plain);
    if (magic->kind != ValueKind::big_integer || magic->s() != std::string_view(reinterpret_cast<const char*>(k_magic), sizeof k_magic))
        corrupt("invalid magic number", 0);
    const Value* version = next("protocol version", plain);
    if (version->kind != ValueKind::integer || version->i() != k_protocol_version)
        throw Error(ErrorKind::unsupported, "", "legacy checkpoint of protocol version " + repr(version, 40) + " (only 1001 is read)");
    c.version = "1001";
    const Value* info = next("sys_info", plain);
    if (info->kind != ValueKind::dict) corrupt("sys_info is not a dict", at);
    bool little = true;
    if (const Value* le = info->get("little_endian")) {
        if (le->kind != ValueKind::boolean) corrupt("sys_info little_endian is " + repr(le, 40), at);
        little = le->i() != 0;
    }
    c.byteorder = little ? "little" : "big";
    c.byteorder_recorded = true;
    if (const Value* ts = info->get("type_sizes"); ts && ts->kind == ValueKind::dict)
        for (size_t i = 0; i < ts->dict_size(); ++i) {
            const Value *k = ts->dict_key(i), *v = ts->dict_value(i);
            if (k->kind != ValueKind::string || v->kind != ValueKind::integer || v->i() < 1 || v->i() > 16)
                corrupt("sys_info type_sizes holds " + repr(k, 40) + ": " + repr(v, 40), at);
            c.type_sizes.push_back({std::string(k->s()), static_cast<int>(v->i())});
        }
    // Storage element sizes do not follow type_sizes (LongStorage is int64 on every platform torch
    // runs on, Windows' 4-byte long included); a writer whose short or int were not 2 and 4 bytes
    // wrote something else.
    for (const auto& [name, size] : c.type_sizes)
        if ((name == "short" && size != 2) || (name == "int" && size != 4) || (name == "long" && size != 4 && size != 8))
            throw Error(ErrorKind::unsupported, "", "legacy checkpoint written where " + name + " is " + std::to_string(size) + " bytes");

    uint64_t pickle_at = at;
    c.pickle_record = "pickle";
    if (options.trace_pickle) c.trace = std::make_unique<PickleTrace>();
    TorchHooks hooks(c.arena, c.storages, c.tensors, c.globals, c.problems, "pickle");
    c.root = next("pickle", hooks, c.trace.get());
    hooks.finish();
    c.pickle = std::make_unique<RecordData>(*file.sub(pickle_at, at - pickle_at));
    c.metadata_size = at - pickle_at;

    const Value* keys = next("storage key list", plain);
    if (keys->kind != ValueKind::list) corrupt("the storage key list is " + repr(keys, 40), at);
    std::unordered_map<std::string, size_t> storage_of;
    for (size_t i = 0; i < c.storages.size(); ++i) storage_of.emplace(c.storages[i].key, i);
    for (const Value* k : keys->items()) {
        if (k->kind != ValueKind::string) corrupt("a storage key is " + repr(k, 40), at);
        std::string key(k->s());
        auto s = storage_of.find(key);
        if (s == storage_of.end()) corrupt("storage " + key + " is listed but no tensor uses it", at);
        StorageInfo& st = c.storages[s->second];
        if (st.record_present) corrupt("storage " + key + " is listed twice", at);
        st.record_present = true;
        uint64_t begin = at + 8, size = 0;
        if (at + 8 <= file.size) {
            uint64_t count = 0;
            for (int b = 0; b < 8; ++b) count |= static_cast<uint64_t>(file.data[at + (little ? b : 7 - b)]) << (8 * b);
            uint64_t esz = dtype_size(st.dtype);
            if (!checked_mul(count, esz)) corrupt("storage " + key + " claims " + std::to_string(count) + " elements", at);
            size = count * esz;
        }
        // A short file keeps what it has: the storage check reports the record as short.
        uint64_t avail = begin <= file.size ? file.size - begin : 0;
        uint64_t held = std::min(size, avail);
        st.record_size = held;
        st.record = c.add_record({key, held, false, 0, {}});
        c.record_ranges.push_back({std::min(begin, file.size), std::min(begin, file.size) + held});
        if (held < size) {
            at = file.size;
            break;
        }
        at = begin + size;
    }
    for (auto& st : c.storages)
        if (!st.record_present) st.record = st.key;  // not listed: the storage check reports it missing
}

}  // namespace ckpt
