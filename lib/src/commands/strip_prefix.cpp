#include "ckpt/strip_prefix.hpp"

#include "base/string_index.hpp"
#include "base/text_util.hpp"

#include <sys/stat.h>

#include <climits>
#include <cstdlib>

#include <algorithm>
#include <ostream>
#include <unordered_set>

#include "ckpt/atomic_file.hpp"
#include "ckpt/error.hpp"
#include "model/keys.hpp"
#include "io/mapped_file.hpp"
#include "ckpt/report.hpp"
#include "io/json.hpp"
#include "pickle/pickle.hpp"
#include "formats/rewrite.hpp"
#include "formats/safetensors.hpp"
#include "io/zip.hpp"
#include "io/zip_writer.hpp"
#include "formats/deepspeed_folder.hpp"
#include "formats/dist.hpp"

namespace ckpt {

namespace {

using text::starts_with;

[[noreturn]] void refuse(const std::string& path, const std::string& why) {
    throw Error(ErrorKind::usage, path, why);
}

std::string in_quotes(std::string_view s) { return "\"" + std::string(s) + "\""; }

// The string keys of a dict value, in order: views of the checkpoint's text, valid while it is open.
std::vector<std::string_view> string_keys(const Value* d) {
    std::vector<std::string_view> keys;
    if (!d) return keys;
    keys.reserve(d->dict_size());
    for (size_t i = 0; i < d->dict_size(); ++i)
        if (d->dict_key(i)->kind == ValueKind::string) keys.push_back(d->dict_key(i)->s());
    return keys;
}

// OrderedDict._metadata of a state dict (set through BUILD), or nullptr.
const Value* metadata_of(const Value* state_dict) {
    if (!state_dict || !state_dict->state || state_dict->state->kind != ValueKind::dict) return nullptr;
    const Value* m = state_dict->state->get("_metadata");
    return m && m->kind == ValueKind::dict ? m : nullptr;
}

// The `_metadata` entries of the state dict that the plan's rule changes, into plan.metadata.
void plan_metadata(const Value* state_dict, RenamePlan& plan) {
    std::string buffer;
    const std::vector<std::string_view> keys = string_keys(metadata_of(state_dict));
    plan.metadata.reserve(keys.size());  // as a rule every entry changes: one table, not its doublings
    for (std::string_view k : keys) {
        std::string_view to = plan.rule.metadata_key_into(buffer, k);
        if (to != k) plan.metadata.push_back({plan.text.keep(k), plan.text.keep(to)});
    }
}

// Every key's new name, in order, kept in plan.text (plan.new_keys); the keys it changes also in
// plan.renamed.
void plan_keys(const std::vector<std::string_view>& keys, RenamePlan& plan) {
    std::vector<std::string_view>& names = plan.new_keys;
    names.reserve(keys.size());
    plan.renamed.reserve(keys.size());  // as a rule every key changes: one table, not its doublings
    std::string buffer;
    for (std::string_view k : keys) {
        std::string_view to = plan.rule.key_into(buffer, k);
        if (to == k) {
            names.push_back(plan.text.keep(k));
            continue;
        }
        names.push_back(plan.text.keep(to));
        plan.renamed.push_back({plan.text.keep(k), names.back()});
    }
}

// A dict's new names (plan_keys), refused when one would be empty or two would be one (each new name
// indexed once: a map of 100,000 strings to strings was a tenth of strip-prefix's time), and its
// `_metadata` entries.
template <class Fail>
void plan_dict(const std::vector<std::string_view>& keys, const Value* dict, RenamePlan& plan, Fail&& fail) {
    plan_keys(keys, plan);
    const std::vector<std::string_view>& new_names = plan.new_keys;
    StringIndex taken;  // new name → its key's row of keys
    taken.reserve(keys.size());
    auto new_name = [&](size_t i) -> std::string_view { return new_names[i]; };
    std::vector<std::string> clashes;
    for (size_t i = 0; i < keys.size(); ++i) {
        std::string_view k = keys[i], to = new_names[i];
        if (to.empty()) fail("key " + in_quotes(k) + " would become empty");
        if (to[0] == '.')
            fail("key " + in_quotes(k) + " would become " + in_quotes(to) + " (a prefix should end with \".\")");
        auto [first, fresh] = taken.insert(to, i, new_name);
        if (!fresh && clashes.size() < 3)
            clashes.push_back(in_quotes(keys[first]) + " and " + in_quotes(k) + " would both become " + in_quotes(to));
        else if (!fresh)
            clashes.push_back("");
    }
    if (!clashes.empty()) {
        std::string msg = std::to_string(clashes.size()) + " key collision" + (clashes.size() > 1 ? "s" : "") + ": ";
        for (size_t i = 0; i < clashes.size() && i < 3; ++i) msg += (i ? "; " : "") + clashes[i];
        fail(msg);
    }
    plan_metadata(dict, plan);
}

}  // namespace

std::string RenameRule::key(std::string_view k) const {
    std::string out;
    return std::string(key_into(out, k));
}

std::string_view RenameRule::key_into(std::string& buffer, std::string_view k) const {
    for (const auto& p : strip)
        if (starts_with(k, p)) k.remove_prefix(p.size());
    buffer.assign(add).append(k);
    return buffer;
}

std::string RenameRule::metadata_key(std::string_view k) const {
    std::string out;
    return std::string(metadata_key_into(out, k));
}

std::string_view RenameRule::metadata_key_into(std::string& buffer, std::string_view k) const {
    for (const auto& p : strip) {
        if (k.empty()) continue;
        if (k == std::string_view(p).substr(0, p.size() - (!p.empty() && p.back() == '.'))) k = {};
        else if (starts_with(k, p)) k.remove_prefix(p.size());
    }
    if (add.empty()) buffer.assign(k);
    else if (k.empty()) buffer.assign(add, 0, add.size() - (add.back() == '.'));
    else buffer.assign(add).append(k);
    return buffer;
}

RenamePlan plan_rename(const Checkpoint& c, const StripPrefixOptions& options) {
    auto fail = [&](const std::string& why) { refuse(c.path(), why); };
    const StateDict& sd = c.state_dict();
    std::string where = sd.path.empty() ? "" : " at '" + sd.path + "'";
    switch (sd.kind) {
        case StateDictKind::none:
            refuse(c.path(), "no state dict (a mapping of names to tensors) found; name it with --state-dict-key");
        case StateDictKind::module:
            refuse(c.path(), "the model" + where + " is a pickled nn.Module: its parameter names are attribute "
                 "names, not keys strip-prefix can rename (save model.state_dict() instead)");
        case StateDictKind::tree:
            refuse(c.path(), "a TorchScript module: its parameter names are attribute paths, not keys strip-prefix "
                 "can rename");
        case StateDictKind::dict: break;
    }
    RenamePlan plan;
    std::vector<std::string_view> keys = string_keys(sd.value);
    plan.keys = keys.size();
    if (keys.empty()) fail("the state dict" + where + " has no keys");

    if (options.prefixes.empty() && options.add_prefix.empty()) {
        std::string wp = wrapper_prefix(keys);
        if (wp.empty()) {
            size_t with_module = 0, with_compile = 0;
            for (const auto& k : keys) {
                with_module += starts_with(k, "module.");
                with_compile += starts_with(k, "_orig_mod.");
            }
            std::string why = with_module || with_compile
                                  ? "no prefix to strip: not every key starts with \"module.\" or \"_orig_mod.\""
                                  : "already clean: no key starts with \"module.\" or \"_orig_mod.\", nothing to strip";
            std::string n = std::to_string(keys.size());
            std::string lead = common_leading_component(keys);
            if (with_module)
                why += " (" + std::to_string(with_module) + " of " + n +
                       " keys start with \"module.\"; --prefix module. strips it from those)";
            else if (with_compile)
                why += " (" + std::to_string(with_compile) + " of " + n +
                       " keys start with \"_orig_mod.\"; --prefix _orig_mod. strips it from those)";
            else if (!lead.empty())
                why += " (all " + n + " keys start with " + in_quotes(lead) + "; --prefix " + lead + " strips it)";
            fail(why);
        }
        for (size_t at = 0; at < wp.size();) {
            std::string part = starts_with(std::string_view(wp).substr(at), "module.") ? "module." : "_orig_mod.";
            plan.rule.strip.push_back(part);
            at += part.size();
        }
        plan.default_rule = true;
    } else {
        plan.rule.strip = options.prefixes;
        plan.rule.add = options.add_prefix;
        std::vector<std::string_view> current = keys;
        for (const auto& p : plan.rule.strip) {
            if (p.empty()) fail("--prefix is empty");
            size_t hits = 0;
            for (auto& k : current)
                if (starts_with(k, p)) {
                    k.remove_prefix(p.size());
                    ++hits;
                }
            if (hits == 0)
                fail("--prefix " + in_quotes(p) + " matches no key of the state dict" + where +
                     " (keys look like " + in_quotes(keys.front()) + ")");
        }
    }

    plan_dict(keys, sd.value, plan, fail);
    plan.state_dict_key = sd.path;

    // The other state dicts beside it at the top level that carry the same prefix (model and ema).
    if (options.state_dict_only || plan.rule.strip.empty()) return plan;
    std::string wp;
    for (const auto& p : plan.rule.strip) wp += p;
    auto carries = [&](const std::vector<std::string_view>& keys) {
        if (plan.default_rule) return wrapper_prefix(keys) == wp;
        return std::all_of(keys.begin(), keys.end(), [&](std::string_view k) { return starts_with(k, plan.rule.strip.front()); });
    };
    for (const OtherStateDict& o : other_state_dicts(c, carries)) {
        RenamePlan other;
        other.rule = plan.rule;
        other.default_rule = plan.default_rule;
        other.keys = o.keys.size();
        other.state_dict_key = o.name;
        plan_dict(o.keys, o.dict, other, [&](const std::string& why) { fail(o.name + ": " + why); });
        plan.others.push_back(std::move(other));
    }
    return plan;
}

namespace {

// data.pkl with the plan applied (see the top of strip_prefix.hpp). `c` must be opened with trace_pickle.
PatchedPickle patch_pickle(const Checkpoint& c, const RenamePlan& plan) {
    const PickleTrace* trace = c.pickle_trace();
    if (!trace) throw Error(ErrorKind::usage, c.path(), "internal: checkpoint opened without a pickle trace");
    ByteView pk = c.pickle_bytes();
    // Each rename's old name indexed once (a StringIndex over the plan's rows, as plan_rename indexes
    // the new names).
    struct Renames {
        const std::vector<KeyRename>& rows;
        StringIndex index;
        explicit Renames(const std::vector<KeyRename>& r) : rows(r) {
            index.reserve(rows.size());
            for (size_t i = 0; i < rows.size(); ++i)
                index.insert(rows[i].from, i, [this](size_t k) -> std::string_view { return rows[k].from; });
        }
        const KeyRename* find(std::string_view name) const {
            size_t i = index.find(name, [this](size_t k) -> std::string_view { return rows[k].from; });
            return i == StringIndex::npos ? nullptr : &rows[i];
        }
    };
    // The state dict, and the others renamed with it: each dict and its `_metadata`, with its renames.
    struct Target {
        const RenamePlan& plan;
        const Value* dict;
        const Value* md;
        Renames keys, meta;
        std::vector<char> found;  // by row of plan.renamed: its key's site seen
        Target(const RenamePlan& p, const Value* d)
            : plan(p), dict(d), md(metadata_of(d)), keys(p.renamed), meta(p.metadata), found(p.renamed.size()) {}
    };
    std::vector<std::unique_ptr<Target>> targets;
    targets.push_back(std::make_unique<Target>(plan, c.state_dict().value));
    for (const RenamePlan& o : plan.others) targets.push_back(std::make_unique<Target>(o, c.root()->get(o.state_dict_key)));
    size_t renames = 0;
    for (const auto& t : targets) renames += t->plan.renamed.size() + t->plan.metadata.size();

    std::vector<PickleEdit> edits;
    edits.reserve(renames);
    std::vector<const Value*> rewritten;  // strings whose pushing opcode now says the new name
    std::vector<uint64_t> sites;          // the opcodes edited so far
    rewritten.reserve(renames);
    sites.reserve(renames);
    PagesBehind behind(&c.file(), pk);  // the sites come in pickle order, as a rule
    for (const auto& ks : trace->key_sites) {
        behind.at(ks.pos);
        Target* target = nullptr;
        const Renames* map = nullptr;
        for (const auto& t : targets)
            if (ks.dict == t->dict || (t->md && ks.dict == t->md)) {
                target = t.get();
                map = ks.dict == t->dict ? &t->keys : &t->meta;
                break;
            }
        if (!map) continue;
        const Value* key = ks.dict->dict_key(ks.entry);
        if (key->kind != ValueKind::string) continue;
        const KeyRename* it = map->find(key->s());
        if (!it) continue;
        uint8_t op = pk.data[ks.pos];
        uint64_t len = traced_opcode_length(pk, ks.pos);
        bool get = op == 'h' || op == 'j' || op == 'g';
        bool push = std::string_view("XTUSV\x8c\x8d", 7).find(static_cast<char>(op)) != std::string_view::npos;
        if (len == 0 || !(get || push)) {
            char hex[8];
            std::snprintf(hex, sizeof hex, "0x%02x", op);
            throw Error(ErrorKind::unsupported, c.path(),
                        c.pickle_record() + ": key " + in_quotes(key->s()) + " is pushed by opcode " + hex +
                            ", which strip-prefix cannot rewrite", ks.pos);
        }
        edits.push_back({ks.pos, len, it->to, true});
        sites.push_back(ks.pos);
        if (push) rewritten.push_back(ks.key);
        if (map == &target->keys) target->found[static_cast<size_t>(it - target->plan.renamed.data())] = 1;
    }
    // Sorted sets: two hash sets of 100,000 nodes were a twentieth of strip-prefix's time.
    std::sort(rewritten.begin(), rewritten.end());
    std::sort(sites.begin(), sites.end());
    auto has = [](const auto& set, const auto& x) { return std::binary_search(set.begin(), set.end(), x); };
    for (const auto& g : trace->string_gets)
        if (has(rewritten, g.value) && !has(sites, g.pos))
            edits.push_back({g.pos, traced_opcode_length(pk, g.pos), g.value->s(), true});
    for (const auto& t : targets)
        for (size_t i = 0; i < t->plan.renamed.size(); ++i)
            if (!t->found[i])
                throw Error(ErrorKind::unsupported, c.path(),
                            c.pickle_record() + ": cannot find where key " + in_quotes(t->plan.renamed[i].from) + " is written");

    return apply_pickle_edits(c, std::move(edits));
}

bool same_file(const std::string& a, const std::string& b) {
    struct stat sa {}, sb {};
    return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

// safetensors: the same header with the new names (and aliases recorded in __metadata__ renamed the
// same way), the same offsets, and the data buffer copied by the kernel in one piece.
uint64_t write_renamed_safetensors(const Checkpoint& c, const RenamePlan& plan, int fd, const std::string& target,
                                   size_t& records) {
    ByteView file = c.file().view();
    SafetensorsHeader h = read_safetensors(file);
    std::unordered_set<std::string> names;
    for (const auto& t : h.tensors) names.insert(t.name);
    std::vector<std::pair<std::string, std::string>> meta;
    for (const auto& [k, v] : h.metadata) {
        bool alias = names.count(v) && !names.count(k);  // alias → kept tensor, as converters record them
        meta.push_back({alias ? plan.rule.key(k) : k, alias ? plan.rule.key(v) : v});
    }
    SafetensorsHeaderWriter header(h.metadata.empty() ? nullptr : &meta);
    uint64_t buffer = 8 + h.header_size;
    for (const auto& t : h.tensors)  // the plan refused renames that collide
        header.add(plan.rule.key(t.name), t.dtype, t.shape, t.begin - buffer, t.end - buffer);
    std::string text = header.finish();
    write_all(fd, text.data(), text.size(), 0, target);
    copy_range(c.file().fd(), buffer, fd, text.size(), file.size - buffer, target);
    records = h.tensors.size();
    return text.size() + (file.size - buffer);
}

// What the written file must hold, taken from the input so that the input can be closed before the
// output is opened again: on 100,000 tensors each opened checkpoint is ~400 MiB.
struct Expected {
    size_t records = 0, storages = 0, tensors = 0;
    const std::vector<std::string_view>* keys = nullptr;  // the state dict's, renamed (the plan's)
    const std::vector<RenamePlan>* others = nullptr;       // the other state dicts renamed with it
};

Expected expected_of(const Checkpoint& in, const RenamePlan& plan) {
    Expected e;
    // A legacy input comes out as a zip: its storages, and data.pkl and version besides.
    e.records = in.record_count() + (in.format() == Format::legacy ? 2 : 0);
    e.storages = in.storages().size();
    e.tensors = in.tensors().size();
    e.keys = &plan.new_keys;
    e.others = &plan.others;
    return e;
}

// The written file, opened again: the same records, storages and tensors, and the new key names.
void check_written(const Expected& want, const std::string& written, const OpenOptions& open, const std::string& target) {
    auto fail = [&](const std::string& why) {
        throw Error(ErrorKind::corrupt, target, "the written file does not read back as it should (" + why +
                                                    "); nothing was written");
    };
    std::unique_ptr<Checkpoint> out;
    try {
        out = Checkpoint::open(written, open);
    } catch (const Error& e) {
        fail(e.message());
    }
    if (out->record_count() != want.records) fail("record count differs");
    if (out->storages().size() != want.storages || out->tensors().size() != want.tensors)
        fail("storages or tensors differ");
    if (!out->problems().empty()) fail(out->problems().front().message);
    if (string_keys(out->state_dict().value) != *want.keys) fail("state-dict keys differ from the plan");
    if (want.others)
        for (const RenamePlan& o : *want.others)
            if (string_keys(out->root()->get(o.state_dict_key)) != o.new_keys) fail(o.state_dict_key + "'s keys differ from the plan");
}

void refuse_damaged(const Checkpoint& c) {
    if (!c.problems().empty())
        throw Error(ErrorKind::corrupt, c.path(),
                    "will not repair a damaged checkpoint: " + c.problems().front().message +
                        (c.problems().size() > 1 ? " (and " + std::to_string(c.problems().size() - 1) + " more)" : ""));
}


// A sharded checkpoint (an index and its shards): the plan made on all of its keys at once, then
// each shard renamed the way a single file is, under its own name beside the output index, and the
// index with its weight_map renamed (everything else in it kept). Every file is written and checked
// before the first is renamed into place.
StripPrefixReport strip_prefix_sharded(const StripPrefixRequest& rq, StripPrefixReport r) {
    std::unique_ptr<Checkpoint> c = Checkpoint::open(rq.input, rq.open);
    refuse_damaged(*c);
    r.plan = plan_rename(*c, rq.options);
    if (rq.dry_run) return r;
    std::string in_index = c->path(), in_dir = text::parent_dir(in_index);
    struct stat st {};
    std::string target = rq.in_place ? in_index
                         : ::stat(rq.output.c_str(), &st) == 0 && S_ISDIR(st.st_mode) ? rq.output + "/" + text::base_name(in_index)
                                                                                      : rq.output;
    std::string out_dir = text::parent_dir(target);
    if (!rq.in_place && same_file(out_dir, in_dir))
        throw Error(ErrorKind::usage, target, "the shards keep their names, so beside the input's index they would replace the input's shards: "
                                              "give another directory, or --in-place");
    std::vector<std::string> targets;
    for (const auto& name : c->shards()) targets.push_back(out_dir + "/" + name);
    targets.push_back(target);
    if (!rq.in_place) {
        std::vector<std::string> reads = c->files_read();
        for (const auto& t : targets) check_output(t, reads, rq.force);
    }

    std::vector<std::unique_ptr<AtomicFile>> files;
    OpenOptions open = rq.open;
    open.trace_pickle = true;
    for (size_t i = 0; i < c->shards().size(); ++i) {
        std::unique_ptr<Checkpoint> shard = Checkpoint::open(in_dir + "/" + c->shards()[i], open);
        refuse_damaged(*shard);
        RenamePlan plan;
        plan.rule = r.plan.rule;
        plan_keys(string_keys(shard->state_dict().value), plan);
        plan_metadata(shard->state_dict().value, plan);
        files.push_back(std::make_unique<AtomicFile>(targets[i]));
        size_t records = 0;
        if (shard->format() == Format::safetensors) {
            r.bytes_written += write_renamed_safetensors(*shard, plan, files.back()->fd(), targets[i], records);
        } else {
            PatchedPickle pickle = patch_pickle(*shard, plan);
            shard->drop_pickle_trace();  // the edits are made
            r.bytes_written += write_torch_zip(*shard, pickle, files.back()->fd(), targets[i], records);
        }
        r.records += records;
        files.back()->start_sync();  // the disk writes while the shard is read back
        Expected want = expected_of(*shard, plan);
        shard.reset();
        check_written(want, files.back()->temp_path(), rq.open, targets[i]);
    }
    // The index as it was (its order and its metadata), with the weight map's names renamed.
    MappedFile index_file(in_index);
    ByteView iv = index_file.view();
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(iv.data, iv.data + iv.size);
    nlohmann::ordered_json map = nlohmann::ordered_json::object();
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it)
        append_new_member(map, r.plan.rule.key(it.key()), it.value());  // the plan refused renames that collide
    j["weight_map"] = map;
    std::string text = j.dump(2) + "\n";
    auto index = std::make_unique<AtomicFile>(target);
    write_all(index->fd(), text.data(), text.size(), 0, target);
    r.bytes_written += text.size();
    commit_set(files, index.get(), rq.force || rq.in_place);
    r.output = target;
    return r;
}

}  // namespace

static StripPrefixReport strip_prefix_unnamed(const StripPrefixRequest& rq) {
    StripPrefixReport r;
    r.file = rq.input;
    r.dry_run = rq.dry_run;
    r.in_place = rq.in_place;
    if (rq.in_place && !rq.output.empty() && !same_file(rq.output, rq.input))
        throw Error(ErrorKind::usage, rq.input, "--in-place replaces the input; -o names another file");
    if (!rq.in_place && rq.output.empty() && !rq.dry_run)
        throw Error(ErrorKind::usage, rq.input, "no output: give -o OUT, --in-place or --dry-run");
    if (dist_target(rq.input).kind != DistKind::none || !sharded_folder_of(rq.input).empty())  // formats/dist.cpp
        throw Error(ErrorKind::usage, rq.input,
                    "is (part of) a sharded checkpoint of distributed training: strip-prefix rewrites one file; "
                    "`ckpt-tool merge` writes the merged state dict with the prefixes stripped (--strip-prefix)");
    if (is_sharded_index(rq.input)) return strip_prefix_sharded(rq, std::move(r));
    std::string target = rq.output;
    if (rq.in_place) {
        // Through a symlink, replace the file it names (as the user means), not the link.
        char* real = ::realpath(rq.input.c_str(), nullptr);
        target = real ? real : rq.input;
        std::free(real);
    }
    if (!rq.in_place && !rq.dry_run) {
        struct stat st {};
        if (::stat(target.c_str(), &st) == 0 && same_file(target, rq.input))
            throw Error(ErrorKind::usage, target, "is the input file (use --in-place to replace it)");
        check_output(target, {rq.input}, rq.force);
    }

    OpenOptions open = rq.open;
    open.trace_pickle = true;
    std::unique_ptr<Checkpoint> c = Checkpoint::open(rq.input, open);
    refuse_damaged(*c);
    if (c->format() == Format::torch_export)
        throw Error(ErrorKind::unsupported, rq.input,
                    "a torch.export archive: its names belong to the exported program and are not renamed apart from it; "
                    "`ckpt-tool convert --weights-only` writes its state dict as .pth or .safetensors, whose keys strip-prefix renames");
    r.plan = plan_rename(*c, rq.options);
    if (rq.dry_run) return r;

    AtomicFile out(target);
    if (c->format() == Format::safetensors) {
        r.bytes_written = write_renamed_safetensors(*c, r.plan, out.fd(), target, r.records);
    } else {
        PatchedPickle pickle = patch_pickle(*c, r.plan);
        c->drop_pickle_trace();  // the edits are made
        r.bytes_written = write_torch_zip(*c, pickle, out.fd(), target, r.records);
    }
    out.start_sync();  // the disk writes while the output is read back from the page cache
    Expected want = expected_of(*c, r.plan);
    c.reset();  // not open twice at once
    check_written(want, out.temp_path(), rq.open, target);
    out.commit(rq.force || rq.in_place);
    r.output = target;
    return r;
}

StripPrefixReport strip_prefix(const StripPrefixRequest& rq) {
    return naming_file(rq.input, [&] { return strip_prefix_unnamed(rq); });
}

nlohmann::json to_json(const StripPrefixReport& r) {
    nlohmann::json j = report_head("strip-prefix");
    j["file"] = r.file;
    j["output"] = r.output.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.output);
    j["dry_run"] = r.dry_run;
    j["in_place"] = r.in_place;
    j["rule"] = {{"strip", r.plan.rule.strip}, {"add", r.plan.rule.add}, {"default", r.plan.default_rule}};
    j["keys"] = r.plan.keys;
    j["renamed_count"] = r.plan.renamed.size();
    auto list = [](const std::vector<KeyRename>& v) {
        nlohmann::json a = nlohmann::json::array();
        for (const auto& x : v) a.push_back({{"from", x.from}, {"to", x.to}});
        return a;
    };
    j["renamed"] = list(r.plan.renamed);
    j["metadata_renamed"] = list(r.plan.metadata);
    nlohmann::json others = nlohmann::json::array();
    for (const RenamePlan& o : r.plan.others)
        others.push_back({{"state_dict_key", o.state_dict_key}, {"keys", o.keys}, {"renamed_count", o.renamed.size()},
                          {"renamed", list(o.renamed)}, {"metadata_renamed", list(o.metadata)}});
    j["others"] = std::move(others);
    j["records"] = r.records;
    j["bytes_written"] = r.bytes_written;
    return j;
}

void render_text(const StripPrefixReport& r, std::ostream& out, const TextStyle& style) {
    Paint paint{style.color};
    std::string what;
    for (const auto& p : r.plan.rule.strip) what += (what.empty() ? "strip " : ", ") + in_quotes(p);
    if (!r.plan.rule.add.empty()) what += (what.empty() ? "add " : "; add ") + in_quotes(r.plan.rule.add);
    std::string counts = std::to_string(r.plan.renamed.size()) + " of " + std::to_string(r.plan.keys) +
                         " keys (" + what + ")";
    if (!r.plan.metadata.empty()) counts += " and " + std::to_string(r.plan.metadata.size()) + " _metadata entries";
    for (const RenamePlan& o : r.plan.others)
        counts += ", and " + std::to_string(o.renamed.size()) + " of " + std::to_string(o.keys) + " in " + in_quotes(o.state_dict_key) +
                  " (the same prefix)";
    if (r.dry_run) {
        out << paint("1", r.file) << ": dry run: would rename " << shown(counts) << "; nothing written\n";
    } else {
        out << paint("1", r.file) << " → " << paint("1", r.output) << ": renamed " << shown(counts) << "; "
            << r.records << " records, " << human_bytes(r.bytes_written) << " written\n";
    }
    // A few renames show the rule (an LLM's thousand keys were a thousand lines); -v and --dry-run
    // list every one, --json has them all.
    size_t limit = r.dry_run || style.verbose ? r.plan.renamed.size() : 3;
    for (size_t i = 0; i < r.plan.renamed.size() && i < limit; ++i)
        out << "  " << shown(r.plan.renamed[i].from) << paint("2", " → ") << paint("32", r.plan.renamed[i].to) << "\n";
    if (r.plan.renamed.size() > limit)
        out << "  … " << r.plan.renamed.size() - limit << " more, the same way (-v lists every rename, --json has them all)\n";
}

}  // namespace ckpt
