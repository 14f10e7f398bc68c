// Will `torch.load(path, weights_only=True)` load this file, and with which torch? (the default since
// torch 2.6). Answered from the pickle as read, per release, by the rules of each release's own
// restricted unpickler (torch/_weights_only_unpickler.py): the opcodes it implements, its allow-list
// of globals, what it lets NEWOBJ make, and what torch.load does with the container.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.hpp"
#include "ckpt/report.hpp"

namespace ckpt {

struct WeightsOnlyBlocker {
    std::string kind;     // "global", "opcode", "newobj", "persistent_id", "container", "import"
    std::string name;     // the global ("argparse.Namespace"), the opcode ("FRAME") …
    std::string message;  // the user's words: what torch does, and why
    uint64_t offset = 0;  // where in the file it is first (0 when not a place in the pickle)
};

struct WeightsOnlyAnswer {
    std::string torch;    // "2.6", "1.13"
    bool applies = true;  // false: torch.load does not open this kind of file (safetensors, a folder …)
    bool loads = false;
    std::vector<WeightsOnlyBlocker> blockers;  // every reason it does not, each kind and name once
    std::string fix;      // what to do: add_safe_globals([...]), convert --weights-only, a newer torch …
};

// The answers for torch 2.6 and torch 1.13, in that order. `frames`: c.frame_problems(), when the
// caller has asked already (a damaged file loads in no torch); asked here otherwise.
std::vector<WeightsOnlyAnswer> weights_only_answers(const Checkpoint& c, const std::vector<Problem>* frames = nullptr);

// As inspect --json and scan --json give them (docs/schema/inspect.schema.json "weights_only").
nlohmann::json weights_only_json(const std::vector<WeightsOnlyAnswer>& answers);
// "torch.load(weights_only=True): torch 2.6 loads it; torch 1.13 refuses it (BINFLOAT)" and the fix;
// nothing where it does not apply.
void render_weights_only(const std::vector<WeightsOnlyAnswer>& answers, std::ostream& out, const Paint& paint);

}  // namespace ckpt
