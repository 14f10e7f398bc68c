// torch.load(weights_only=True), release by release. What each restricted unpickler does
// (torch/_weights_only_unpickler.py of torch 2.6.0 and of torch 1.13.1, read side by side):
//   - opcodes: protocol 2's that torch.save writes, nothing of protocols 3-5 (no FRAME, MEMOIZE,
//     STACK_GLOBAL, SHORT_BINUNICODE, BINBYTES …); torch 1.13 also lacks BINFLOAT, so no float
//     anywhere in the object loads there;
//   - GLOBAL: only names on its allow-list (global_lists.cpp holds both lists); torch 2.6 loads
//     nested jagged tensors' and DTensors' names once their modules are imported;
//   - NEWOBJ: torch 1.13 makes nn.Parameter only, torch 2.6 any allowed class;
//   - the container: torch 2.6 refuses a TorchScript archive with weights_only=True, torch 1.13
//     hands it to torch.jit.load.
// Every reason is collected, not just the first torch would stop at: the user fixes them all at once.
#include "ckpt/weights_only.hpp"

#include <algorithm>
#include <ostream>

#include "pickle/global_lists.hpp"
#include "pickle/pickle_ops.hpp"

namespace ckpt {

namespace {

namespace ops = pickle_ops;

struct Release {
    const char* name;
    bool binfloat;   // BINFLOAT implemented
    bool newobj_any; // NEWOBJ of any allowed class (else nn.Parameter only)
    bool torchscript;  // a TorchScript archive loads (through torch.jit.load)
};
constexpr Release k_releases[] = {{"2.6", true, true, false}, {"1.13", false, false, true}};

bool opcode_allowed(uint8_t op, const Release& r) {
    switch (op) {
        case ops::GLOBAL: case ops::NEWOBJ: case ops::REDUCE: case ops::BUILD: case ops::APPEND: case ops::APPENDS:
        case ops::SETITEM: case ops::SETITEMS: case ops::MARK: case ops::TUPLE: case ops::TUPLE1: case ops::TUPLE2:
        case ops::TUPLE3: case ops::NONE: case ops::NEWFALSE: case ops::NEWTRUE: case ops::EMPTY_TUPLE:
        case ops::EMPTY_LIST: case ops::EMPTY_DICT: case ops::EMPTY_SET: case ops::BININT: case ops::BININT1:
        case ops::BININT2: case ops::BINUNICODE: case ops::SHORT_BINSTRING: case ops::BINPERSID: case ops::BINGET:
        case ops::LONG_BINGET: case ops::BINPUT: case ops::LONG_BINPUT: case ops::LONG1: case ops::PROTO: case ops::STOP:
            return true;
        case ops::BINFLOAT: return r.binfloat;
        default: return false;
    }
}

bool global_allowed(const std::string& full, const Release& r) {
    if (!global_lists::torch_weights_only(full)) return false;
    if (std::string_view(r.name) == "2.6") return full != "torch._utils._rebuild_sparse_csr_tensor";
    return !global_lists::torch_weights_only_2_6_only(full);
}

std::string opcode_why(uint8_t op, const Release& r) {
    const ops::Info* i = ops::info(op);
    std::string name = i ? i->name : "?";
    if (op == ops::BINFLOAT)
        return "a float (BINFLOAT) is not read by torch " + std::string(r.name) + "'s weights-only unpickler (torch ≥ 2.0 reads floats)";
    return name + (i && i->protocol > 2 ? " (pickle protocol " + std::to_string(i->protocol) + ")" : std::string()) +
           " is not an opcode torch " + r.name + "'s weights-only unpickler implements (\"Unsupported operand " +
           std::to_string(op) + "\")";
}

}  // namespace

std::vector<WeightsOnlyAnswer> weights_only_answers(const Checkpoint& c, const std::vector<Problem>* frames) {
    std::vector<WeightsOnlyAnswer> out;
    bool applies = c.shards().empty() && (c.format() == Format::torch_zip || c.format() == Format::torchscript ||
                                          c.format() == Format::legacy);
    // The opcodes used, each with where it first is (as the pickle ran).
    const std::vector<std::pair<uint8_t, uint64_t>>& used = c.pickle_opcodes();
    // A file torch cannot read whatever weights_only says: a storage without its record, a record
    // whose local header another save overwrote (a CRC after the data is not checked by torch.load).
    std::string damage;
    if (applies) {
        if (!c.problems().empty()) damage = c.problems().front().message;
        std::vector<Problem> asked;
        if (damage.empty()) {
            if (!frames) frames = &(asked = c.frame_problems());
            for (const Problem& p : *frames)
                if (damage.empty() && p.kind == "record_header") damage = p.message;
        }
    }
    for (const Release& r : k_releases) {
        WeightsOnlyAnswer a;
        a.torch = r.name;
        a.applies = applies;
        if (!applies) {
            out.push_back(std::move(a));
            continue;
        }
        if (!damage.empty()) {
            a.blockers.push_back({"damage", "a damaged file", "torch.load fails on it, with weights_only or without: " + damage, 0});
            a.fix = "'ckpt-tool verify " + c.path() + "' says what is damaged; save the checkpoint again (from one process)";
            out.push_back(std::move(a));
            continue;
        }
        std::vector<std::string> safe_globals, dangerous;
        bool imports = false, opcodes = false;
        if (c.format() == Format::torchscript) {  // torch.load hands it to torch.jit.load, or refuses it: its pickles do not matter
            if (!r.torchscript)
                a.blockers.push_back({"container", "TorchScript",
                                      "a TorchScript archive: torch " + std::string(r.name) +
                                          " refuses it with weights_only=True (torch.jit.load reads it, and runs its code)", 0});
            a.loads = a.blockers.empty();
            if (!a.loads) a.fix = "torch.jit.load reads it (a TorchScript module runs its own code: trust it first)";
            else
                a.fix = "torch " + std::string(r.name) + " (every torch up to 2.5.1) hands it to torch.jit.load even with "
                        "weights_only=True, which runs its code (CVE-2025-32434): weights_only does not protect here";
            out.push_back(std::move(a));
            continue;
        }
        for (const auto& [op, pos] : used)
            if (!opcode_allowed(op, r)) {
                a.blockers.push_back({"opcode", ops::name(op), opcode_why(op, r) + " (at byte " + std::to_string(pos) + " of " + c.pickle_record() + ")", pos});
                opcodes = true;
            }
        if (std::string_view(r.name) == "1.13")
            for (const TensorInfo& t : c.tensors())
                if (t.extra && t.extra->coalesced_flag) {
                    a.blockers.push_back({"tensor", "sparse is_coalesced",
                                          "a sparse tensor saved with its is_coalesced flag (torch ≥ 2.1): torch 1.13 cannot rebuild it, "
                                          "with or without weights_only", 0});
                    break;
                }
        for (const GlobalRef& g : c.globals()) {
            std::string full = g.full_name();
            if (g.bound_methods) {  // getattr of a bound method: not on any torch's list
                a.blockers.push_back({"global", full, full + " (bound methods of torch's schedulers) is not on torch " + std::string(r.name) +
                                                          "'s allow-list", g.first_offset});
                safe_globals.push_back(full);
                continue;
            }
            if (global_allowed(full, r)) {
                if (g.instantiated && !r.newobj_any && full != "torch.nn.parameter.Parameter")
                    a.blockers.push_back({"newobj", full, "torch " + std::string(r.name) + " makes only nn.Parameter by NEWOBJ, not " + full,
                                          g.first_instantiated});
                continue;
            }
            if (std::string_view(r.name) == "2.6" && global_lists::torch_when_imported(full)) {
                a.blockers.push_back({"import", full, full + " loads once " +
                                                          std::string(full.rfind("torch.distributed", 0) == 0 ? "torch.distributed.tensor"
                                                                                                                 : "torch.nested and torch._dynamo") +
                                                          " are imported before torch.load", g.first_offset});
                imports = true;
                continue;
            }
            a.blockers.push_back({"global", full, full + " is not on torch " + std::string(r.name) + "'s weights-only allow-list (at byte " +
                                                      std::to_string(g.first_offset) + " of " + g.record + ")", g.first_offset});
            (g.cls == GlobalClass::dangerous ? dangerous : safe_globals).push_back(full);
        }
        a.loads = a.blockers.empty();
        if (!a.loads && !dangerous.empty()) {
            // Code the pickle would run: no allow-list entry, no loader setting and no conversion of
            // this file is advice to give; the advice is not to load it.
            std::string list;
            for (size_t i = 0; i < dangerous.size() && i < 4; ++i) list += (i ? ", " : "") + dangerous[i];
            if (dangerous.size() > 4) list += ", …";
            a.fix = "do not load this file: it names " + list + ", which " + (dangerous.size() == 1 ? "runs" : "run") +
                    " code or reaches the system when unpickled ('ckpt-tool scan' says why); no torch.load setting makes that safe";
        } else if (!a.loads) {
            std::vector<std::string> fixes;
            if (!safe_globals.empty() && std::string_view(r.name) == "2.6") {
                std::string list;
                for (size_t i = 0; i < safe_globals.size() && i < 6; ++i) list += (i ? ", " : "") + safe_globals[i];
                if (safe_globals.size() > 6) list += ", …";
                fixes.push_back("if you trust them, torch.serialization.add_safe_globals([" + list + "]) before torch.load");
            }
            if (imports) fixes.push_back("import torch.nested._internal.nested_tensor and torch._dynamo (or torch.distributed.tensor) first");
            if (opcodes && std::string_view(r.name) != "2.6" && std::all_of(a.blockers.begin(), a.blockers.end(), [](const WeightsOnlyBlocker& b) {
                    return b.kind == "opcode" && b.name == "BINFLOAT";
                }))
                fixes.push_back("torch ≥ 2.0 loads it");
            fixes.push_back("`ckpt-tool convert --weights-only` writes its state dict alone, which loads with weights_only=True in both");
            for (size_t i = 0; i < fixes.size(); ++i) a.fix += (i ? "; or " : "") + fixes[i];
        }
        out.push_back(std::move(a));
    }
    return out;
}

nlohmann::json weights_only_json(const std::vector<WeightsOnlyAnswer>& answers) {
    nlohmann::json out = nlohmann::json::array();
    for (const WeightsOnlyAnswer& a : answers) {
        nlohmann::json blockers = nlohmann::json::array();
        for (const auto& b : a.blockers) blockers.push_back({{"kind", b.kind}, {"name", b.name}, {"message", b.message}});
        out.push_back({{"torch", a.torch}, {"applies", a.applies}, {"loads", a.applies ? nlohmann::json(a.loads) : nlohmann::json(nullptr)},
                       {"blockers", std::move(blockers)}, {"fix", a.fix.empty() ? nlohmann::json(nullptr) : nlohmann::json(a.fix)}});
    }
    return out;
}

void render_weights_only(const std::vector<WeightsOnlyAnswer>& answers, std::ostream& out, const Paint& paint) {
    if (answers.empty() || !answers.front().applies) return;
    out << "torch.load(weights_only=True):";
    std::string fix;
    for (size_t i = 0; i < answers.size(); ++i) {
        const WeightsOnlyAnswer& a = answers[i];
        out << (i ? ";" : "") << " torch " << a.torch << " " << (a.loads ? paint("32", "loads it") : paint("31", "refuses it"));
        if (a.loads) {
            if (!a.fix.empty()) {  // it loads, and there is something to know (a TorchScript archive's code runs)
                out << " " << paint("31", "and runs its code");
                if (fix.empty()) fix = a.fix;
            }
            continue;
        }
        out << " (";
        for (size_t k = 0; k < a.blockers.size() && k < 4; ++k) out << (k ? ", " : "") << shown(a.blockers[k].name);
        if (a.blockers.size() > 4) out << ", … " << a.blockers.size() - 4 << " more";
        out << ")";
        if (fix.empty()) fix = a.fix;
    }
    out << "\n";
    if (!fix.empty()) out << "  " << paint("2", "fix: " + fix) << "\n";
}

}  // namespace ckpt
