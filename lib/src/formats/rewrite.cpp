#include "formats/rewrite.hpp"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_set>

#include "ckpt/bytes.hpp"
#include "ckpt/error.hpp"
#include "io/mapped_file.hpp"
#include "pickle/pickle.hpp"
#include "pickle/pickle_ops.hpp"
#include "io/zip.hpp"
#include "io/zip_writer.hpp"
#include "base/text_util.hpp"

namespace ckpt {

PatchedPickle apply_pickle_edits(const Checkpoint& c, std::vector<PickleEdit> edits) {
    const PickleTrace* trace = c.pickle_trace();
    if (!trace) throw Error(ErrorKind::usage, c.path(), "internal: checkpoint opened without a pickle trace");
    ByteView pk = c.pickle_bytes();
    for (uint64_t f : trace->frames) edits.push_back({f, traced_opcode_length(pk, f), {}, false});
    if (c.format() == Format::legacy)  // its persistent ids, as the zip format's: without the sixth item
        for (const auto& p : trace->persistent_ids) {
            if (p.first == "module")
                throw Error(ErrorKind::unsupported, c.path(),
                            "a pickled nn.Module in the legacy format names its classes by persistent ids, which the zip "
                            "format cannot hold; convert its state dict with --weights-only");
            if (p.view_pos == 0) continue;
            if (pk.data[p.view_pos] != 'N')
                throw Error(ErrorKind::unsupported, c.path(), "pickle: a storage's view metadata is not None", p.view_pos);
            edits.push_back({p.view_pos, 1, {}, false});
        }
    std::sort(edits.begin(), edits.end(), [](const PickleEdit& a, const PickleEdit& b) { return a.pos < b.pos; });
    uint64_t at = 0;
    for (const PickleEdit& e : edits) {
        if (e.pos < at || e.len == 0 || e.pos + e.len > pk.size)
            throw Error(ErrorKind::corrupt, c.path(), c.pickle_record() + ": overlapping pickle edits", e.pos);
        at = e.pos + e.len;
    }
    return PatchedPickle(pk, std::move(edits), &c.file());
}

PatchedPickle::PatchedPickle(ByteView original, std::vector<PickleEdit> sorted_edits, const MappedFile* file)
    : m_original(original), m_file(file), m_edits(std::move(sorted_edits)), m_size(original.size) {
    for (const PickleEdit& e : m_edits) m_size = m_size - e.len + e.size();
}

void PatchedPickle::for_each_piece(const std::function<void(const char*, size_t)>& piece) const {
    const char* pk = reinterpret_cast<const char*>(m_original.data);
    char head[5] = {'X'};
    uint64_t at = 0;
    PagesBehind behind(m_file, m_original);
    for (const PickleEdit& e : m_edits) {
        if (e.pos > at) piece(pk + at, e.pos - at);
        behind.at(e.pos);
        if (e.unicode) {
            for (int k = 0; k < 4; ++k) head[1 + k] = static_cast<char>(e.text.size() >> (8 * k));
            piece(head, 5);
            if (!e.text.empty()) piece(e.text.data(), e.text.size());
        } else if (!e.text.empty()) {
            piece(e.text.data(), e.text.size());
        }
        at = e.pos + e.len;
    }
    if (m_original.size > at) piece(pk + at, m_original.size - at);
    behind.done();
}

uint32_t PatchedPickle::crc32() const {
    uint32_t crc = 0;
    for_each_piece([&](const char* p, size_t n) { crc = crc32_of({reinterpret_cast<const uint8_t*>(p), n}, crc); });
    return crc;
}

namespace {

std::string global_opcode(const std::string& module_dot_name) {
    size_t dot = module_dot_name.rfind('.');
    return "c" + module_dot_name.substr(0, dot) + "\n" + module_dot_name.substr(dot + 1) + "\n";
}

bool is_get(uint8_t op) { return op == 'h' || op == 'j' || op == 'g'; }

}  // namespace

std::string_view kept_text(std::string text) {
    static std::mutex lock;
    static std::set<std::string> texts;
    std::lock_guard<std::mutex> hold(lock);
    return *texts.insert(std::move(text)).first;
}

std::vector<PickleEdit> retype_storages(const Checkpoint& c, const std::unordered_map<size_t, DType>& retype) {
    const PickleTrace* trace = c.pickle_trace();
    if (!trace) throw Error(ErrorKind::usage, c.path(), "internal: checkpoint opened without a pickle trace");
    ByteView pk = c.pickle_bytes();
    std::unordered_map<std::string, size_t> storage_of;
    for (size_t i = 0; i < c.storages().size(); ++i) storage_of.emplace(c.storages()[i].key, i);
    std::unordered_map<uint64_t, const PickleTrace::StackGlobal*> stack_global_at;
    for (const auto& g : trace->stack_globals) stack_global_at.emplace(g.pos, &g);

    // Every push of a class that matters, in pickle order: the persistent ids' and the GETs of globals.
    struct Site {
        uint64_t pos;
        const Value* cls;
        std::optional<std::string> want;  // persistent ids: the class it must push
    };
    std::vector<Site> sites;
    std::unordered_set<uint64_t> pid_pos;
    std::unordered_set<size_t> seen;
    for (const auto& p : trace->persistent_ids) {
        if (!p.has_key) continue;
        auto s = storage_of.find(std::string(p.key));
        if (s == storage_of.end()) continue;
        seen.insert(s->second);
        auto r = retype.find(s->second);
        std::string want = r != retype.end() ? "torch." + std::string(storage_class_of(r->second)) : global_name(p.cls);
        sites.push_back({p.type_pos, p.cls, want});
        pid_pos.insert(p.type_pos);
    }
    for (const auto& g : trace->string_gets)
        if (g.value->kind == ValueKind::global && !pid_pos.count(g.pos)) sites.push_back({g.pos, g.value, std::nullopt});
    for (const auto& [storage, dtype] : retype)
        if (!seen.count(storage))
            throw Error(ErrorKind::unsupported, c.path(),
                        c.pickle_record() + ": cannot find where storage " + std::string(c.storages()[storage].key) + "'s type is written");
    std::sort(sites.begin(), sites.end(), [](const Site& a, const Site& b) { return a.pos < b.pos; });

    // A class object is made once, where GLOBAL or STACK_GLOBAL runs, and fetched from the memo after;
    // `now` is what each made object is once the edits apply.
    std::vector<PickleEdit> edits;
    std::unordered_map<const Value*, std::string> now;
    std::unordered_set<const Value*> renamed_strings;  // STACK_GLOBAL names whose push now says another
    std::unordered_set<uint64_t> edited;
    auto cannot = [&](uint64_t pos, const std::string& why) {
        throw Error(ErrorKind::unsupported, c.path(), c.pickle_record() + ": " + why + ", which cannot be rewritten", pos);
    };
    for (const Site& s : sites) {
        std::string was = global_name(s.cls);
        std::string want = s.want.value_or(was);
        uint8_t op = pk.data[s.pos];
        if (is_get(op)) {
            auto n = now.find(s.cls);
            if ((n == now.end() ? was : n->second) != want) {
                edits.push_back({s.pos, traced_opcode_length(pk, s.pos), kept_text(global_opcode(want))});
                edited.insert(s.pos);
            }
            continue;
        }
        if (want == was) continue;
        if (op == pickle_ops::GLOBAL) {
            edits.push_back({s.pos, traced_opcode_length(pk, s.pos), kept_text(global_opcode(want))});
        } else if (op == pickle_ops::STACK_GLOBAL && stack_global_at.count(s.pos)) {
            const auto* g = stack_global_at.at(s.pos);
            if (want.substr(0, want.rfind('.')) != std::string(s.cls->s())) cannot(s.pos, "a storage class of another module");
            uint64_t len = traced_opcode_length(pk, g->name_pos);
            if (len == 0 || edited.count(g->name_pos)) cannot(g->name_pos, "a storage class name pushed in an unexpected way");
            edits.push_back({g->name_pos, len, kept_text(want.substr(want.rfind('.') + 1)), true});
            edited.insert(g->name_pos);
            if (!is_get(pk.data[g->name_pos])) renamed_strings.insert(g->name);
        } else {
            char hex[8];
            std::snprintf(hex, sizeof hex, "0x%02x", op);
            cannot(s.pos, std::string("a storage class pushed by opcode ") + hex);
        }
        now[s.cls] = want;
    }
    // A renamed string fetched again elsewhere keeps its old text there.
    for (const auto& g : trace->string_gets)
        if (renamed_strings.count(g.value) && !edited.count(g.pos))
            edits.push_back({g.pos, traced_opcode_length(pk, g.pos), g.value->s(), true});
    return edits;
}

uint64_t write_torch_zip(const Checkpoint& c, const PatchedPickle& pickle, int fd, const std::string& target,
                         size_t& records, const CustomRecord& custom) {
    ZipWriter w(fd, target);
    auto add_pickle = [&](std::string_view name) {
        w.add_pieces(name, pickle.size(), pickle.crc32(), [&](const auto& write) { pickle.for_each_piece(write); });
    };
    if (c.format() == Format::legacy) {
        // The modern layout: ROOT/data.pkl, ROOT/data/KEY for each storage, ROOT/version; ROOT is the
        // target's stem, as torch.save names it.
        std::string base = text::base_name(target);
        std::string root = base.substr(0, base.find('.') == 0 || base.find('.') == std::string::npos ? base.size() : base.find('.'));
        if (root.empty()) root = "archive";
        add_pickle(root + "/data.pkl");
        for (size_t i = 0; i < c.records().size(); ++i) {
            std::string name = root + "/data/" + std::string(c.records()[i].name);
            if (custom && custom(i, name, w)) continue;
            RecordData d = c.record_data(i);  // no CRC in this format: it is taken here, then the kernel copies
            w.add_copy(name, c.file(), *c.record_file_offset(i), d.view().size, crc32_of(d.view()));
            c.file().release(d.view());
        }
        static const uint8_t version[] = {'3', '\n'};
        w.add(root + "/version", {version, 2}, crc32_of({version, 2}));
    } else {
        const ZipArchive& zip = c.zip();
        // The names come from the input's central directory, which the open gave back: its pages
        // leave again behind this loop (9 MiB of 100,000 records').
        ByteView cd = zip.central_directory();
        PagesBehind behind(&c.file(), cd);
        for (size_t i = 0; i < zip.entries().size(); ++i) {
            const ZipEntry& e = zip.entries()[i];
            behind.at(static_cast<uint64_t>(reinterpret_cast<const uint8_t*>(e.name.data()) - cd.data));
            if (e.name == c.pickle_record()) {
                add_pickle(e.name);
            } else if (custom && custom(i, e.name, w)) {
                continue;
            } else if (e.method == 0) {
                w.add_copy(e.name, c.file(), zip.data_offset(e, c.file().fd()), e.size, e.crc32);
            } else {
                RecordData d = zip.record_data(e);  // DEFLATE in, STORED out (the CRC is of these bytes)
                w.add(e.name, d.view(), e.crc32);
            }
        }
    }
    records = w.records();
    return w.finish();
}

}  // namespace ckpt
