// What the scanner's VM records: every global it resolves, every call of something that is not a
// named global, every mutation of a global or of what a function returned, every name computed at
// load time, and the bytes a pickle hands to a pickle-loading call (or decodes itself first). The
// hooks never refuse what a real unpickler would do; they note it and let the VM go on.
#pragma once

#include <string.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "pickle/bound_methods.hpp"
#include "ckpt/bytes.hpp"
#include "pickle/pickle.hpp"
#include "pickle/pickle_ops.hpp"
#include "ckpt/globals.hpp"
#include "ckpt/value.hpp"

namespace ckpt {

struct SeenGlobal {
    std::string module;  // as written
    std::string name;
    uint64_t offset = 0;
    uint8_t opcode = 0;
};

struct ScanEvent {
    std::string kind;    // a ScanFinding kind
    std::string global;  // the global it concerns, "" for none
    uint64_t offset = 0;
    uint8_t opcode = 0;
    std::string message;
    GlobalClass severity = GlobalClass::dangerous;
};

struct NestedBytes {
    ByteView bytes;
    uint64_t offset = 0;  // where the value holding them was made
    std::string why;      // "bytes", "the argument of pickle.loads", "base64 text decoded by …"
    bool surely = false;  // handed to a loader: a pickle whatever its first byte
};

class ScanHooks : public PickleHooks {
public:
    // `data` and `base`: the pickle being run, to name the opcode at an offset.
    ScanHooks(ValueArena& arena, ByteView data, uint64_t base) : m_arena(arena), m_data(data), m_base(base) {
        static constexpr std::string_view k_wrapper = "NumpyArrayWrapper";
        m_names_joblib = ::memmem(data.data, data.size, k_wrapper.data(), k_wrapper.size()) != nullptr;
    }
    bool may_step_over_bytes() const override { return joblib && m_names_joblib; }

    std::vector<SeenGlobal> globals;
    std::vector<ScanEvent> events;
    std::vector<NestedBytes> nested;
    BoundMethods methods;  // builtins.getattr's uses
    // torch.storage._load_from_bytes's calls: on bytes the pickle holds (how pickle.dumps of a tensor
    // stores its storage; those bytes are scanned as a file of their own), and on anything else.
    uint64_t loads_of_constant_bytes = 0, other_loads = 0;
    // Globals handed to a call as values (map(getattr, …), sorted(key=…)): a callable passed on is
    // called by what it is passed to, so no verdict that rests on how the pickle calls it holds.
    std::set<std::string> passed_as_values;

    Value* global(Value* g, std::string_view written) override;
    Value* reduce(Value* made) override;
    Value* persistent_load(Value* pid, uint64_t offset) override;
    Value* computed_global(Value* module, Value* name, uint64_t offset) override;
    Value* extension(uint32_t code, uint64_t offset) override;
    void mutate(Value* target, uint8_t opcode, uint64_t offset) override;
    uint64_t inline_data(Value* target, uint64_t at) override;
    // Inline bytes stepped over (data offsets, lengths): the disassembly steps over them too.
    std::vector<std::pair<uint64_t, uint64_t>> inline_ranges;
    // false: read as pickle.load reads a joblib file (no inline arrays: their bytes are opcodes too).
    bool joblib = true;

private:
    uint8_t opcode_at(uint64_t offset) const {
        uint64_t pos = offset - m_base;
        return offset >= m_base && pos < m_data.size ? m_data.data[pos] : 0;
    }
    Value* placeholder(uint64_t offset, std::string_view what);
    bool decode(Value* made, const std::string& fn, ValueSpan args);

    ValueArena& m_arena;
    bool m_names_joblib = false;  // the pickle names joblib's NumpyArrayWrapper somewhere
    ByteView m_data;
    uint64_t m_base;
    // What decoding calls may produce in one pickle, all of them together: a payload is decoded, a
    // thousand calls of zlib.decompress are not a way to make the scan take memory and minutes.
    uint64_t m_decode_budget = 256u << 20;
};

// Bytes worth scanning on their own: a pickle's start (PROTO) or a zip's (a torch.save archive held as
// bytes, as io.BytesIO states and DCP's byte items hold them).
inline bool nested_candidate(ByteView b) {
    return pickle_ops::proto_start(b, 0) || (b.size >= 4 && b.data[0] == 'P' && b.data[1] == 'K' && b.data[2] == 3 && b.data[3] == 4);
}

// Is `v` a global the hooks made up for a name computed at load time?
inline bool computed_placeholder(const Value* v) { return v && v->kind == ValueKind::global && v->s().empty(); }

// Text decoders the scanner applies on its own: strict hex, and base64 as Python's b64decode reads it
// (characters outside the alphabet skipped; `url`: - and _ for + and /). false for text that does not
// decode.
bool decode_hex(std::string_view text, std::string& out, bool skip_blanks = false);
bool decode_base64(std::string_view text, std::string& out, bool url = false);

}  // namespace ckpt
