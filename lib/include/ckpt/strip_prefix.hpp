// `strip-prefix`: rename the keys of a checkpoint's state dict (remove `module.` / `_orig_mod.` or a
// given prefix, or add one) and write everything else back as it was.
//
// How: the pickle is patched, not re-serialised. Every byte of data.pkl stays as torch wrote it except
// the opcodes that push the renamed keys (and the state dict's `_metadata` module paths), which become
// BINUNICODE strings of the new names; where another part of the file fetched the same string object
// from the memo, that fetch gets the old text inline, so nothing else changes. FRAME opcodes are
// dropped (framing is optional and their lengths would be stale). Storage records are copied by the
// kernel (copy_file_range) with their CRC-32, never decoded. The output is a STORED, 64-byte aligned
// zip with the same records in the same order.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.hpp"
#include "ckpt/report.hpp"
#include "ckpt/text_store.hpp"

namespace ckpt {

// What happens to a key: each prefix of `strip`, in order, is removed from the key if it starts with
// it; then `add` is put in front.
struct RenameRule {
    std::vector<std::string> strip;
    std::string add;
    std::string key(std::string_view k) const;
    // The same, made in `buffer` (no allocation once it is large enough); a view of it.
    std::string_view key_into(std::string& buffer, std::string_view k) const;
    // torch's consume_prefix_in_state_dict_if_present for `_metadata` module paths: "" stays, the
    // prefix without its dot ("module") becomes "", "module.x" becomes "x"; adding does the reverse.
    std::string metadata_key(std::string_view k) const;
    std::string_view metadata_key_into(std::string& buffer, std::string_view k) const;
};

struct KeyRename {
    std::string_view from, to;  // the plan's own text (RenamePlan::text)
};

struct RenamePlan {
    RenameRule rule;
    bool default_rule = false;           // no --prefix / --add-prefix: the wrapper prefixes
    size_t keys = 0;                     // string keys of the state dict
    std::vector<KeyRename> renamed;      // the keys that change, in file order
    std::vector<KeyRename> metadata;     // `_metadata` entries that change
    std::vector<std::string_view> new_keys;  // every string key's new name, in order
    TextStore text;                      // the names the renames view: one block per 64 KiB, not two strings a key
    // The other state dicts of a training checkpoint that carry the same prefix ({model, ema, …}:
    // the EMA weights saved beside the model's), renamed by the same rule in the same run: each one's
    // plan, its top-level key in `state_dict_key` (its own `others` empty). Without a --prefix, those
    // whose keys all carry the wrapper prefix the state dict's carry; with one, those whose keys all
    // start with it. StripPrefixOptions::state_dict_only leaves them as they are.
    std::vector<RenamePlan> others;
    std::string state_dict_key;
};

struct StripPrefixOptions {
    std::vector<std::string> prefixes;  // --prefix (none: module. and _orig_mod., repeatedly)
    std::string add_prefix;             // --add-prefix
    bool state_dict_only = false;       // --state-dict-only: not the other state dicts that carry the prefix
};

// Throws Error(usage) naming the file when the rename cannot be done safely: no state-dict mapping,
// a prefix no key carries, two keys that would get one name.
RenamePlan plan_rename(const Checkpoint& c, const StripPrefixOptions& options);

struct StripPrefixRequest {
    std::string input, output;  // output "" with in_place
    StripPrefixOptions options;
    OpenOptions open;
    bool dry_run = false, in_place = false, force = false;
};

struct StripPrefixReport {
    std::string file, output;
    RenamePlan plan;
    bool dry_run = false, in_place = false;
    uint64_t bytes_written = 0;
    size_t records = 0;
};

// The whole command: checks, plan, atomic write, and a read-back of the written file before it is
// renamed into place. Throws Error for anything that stops it; nothing is written then.
StripPrefixReport strip_prefix(const StripPrefixRequest& request);

nlohmann::json to_json(const StripPrefixReport& report);
void render_text(const StripPrefixReport& report, std::ostream& out, const TextStyle& style);

}  // namespace ckpt
