#include <iostream>

#include "ckpt/strip_prefix.hpp"
#include "command.hpp"

namespace app {

namespace {
struct StripPrefixArgs {
    ckpt::StripPrefixRequest request;
    std::string state_dict_key;
    bool json = false;
};
}  // namespace

Runner setup_strip_prefix(CLI::App& sub, const GlobalOptions& global) {
    auto a = std::make_shared<StripPrefixArgs>();
    ckpt::StripPrefixRequest& r = a->request;
    sub.add_option("IN", r.input, "Checkpoint to repair: a file, or a sharded index or its directory (never modified, unless --in-place)")->required();
    sub.add_option("-o,--output", r.output, "Where to write the repaired checkpoint (sharded: the new index, or a directory for it and its shards)");
    sub.add_option("--prefix", r.options.prefixes,
                   "Remove exactly this prefix from every key that has it (repeatable, applied in order); "
                   "default: module. and _orig_mod., repeatedly, when every key carries them");
    sub.add_option("--add-prefix", r.options.add_prefix,
                   "Put this prefix in front of every key (after any --prefix), e.g. to load into a "
                   "still-wrapped model");
    sub.add_option("--state-dict-key", a->state_dict_key, "Dotted path of the state dict (default: detected)");
    sub.add_flag("--state-dict-only", r.options.state_dict_only,
                 "Rename the state dict's keys only, not those of the other state dicts beside it that carry the same prefix (ema …)");
    sub.add_flag("--dry-run", r.dry_run, "Print the old → new mapping; write nothing");
    sub.add_flag("--in-place", r.in_place, "Replace IN itself (atomically)");
    sub.add_flag("--force", r.force, "Overwrite OUT if it exists");
    sub.add_flag("--json", a->json, "One JSON object on stdout (docs/schema/strip-prefix.schema.json)");
    return [a, &global]() {
        return reporting_errors("strip-prefix", a->json, a->request.input, [&] {
            if (!a->state_dict_key.empty()) a->request.open.state_dict_key = a->state_dict_key;
            ckpt::StripPrefixReport report = ckpt::strip_prefix(a->request);
            print_report(report, a->json, global);
            return 0;
        });
    };
}

}  // namespace app
