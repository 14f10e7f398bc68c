// The restricted pickle VM on any bytes, three ways: with the plain PickleHooks (no global means
// anything), with the library's TorchHooks (storages, rebuild functions, OrderedDict … as a torch
// pickle is read), and TorchHooks with a PickleTrace (what strip-prefix and convert record) and room
// reserved, as read_torch_zip reserves it (small storage keys found by number). Each
// result's root is rendered with repr, which must stop on cycles and depth.
#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/checkpoint.hpp"
#include "ckpt/error.hpp"
#include "pickle/pickle.hpp"
#include "ckpt/value.hpp"
#include "formats/torch_hooks.hpp"  // lib/src: private to the library

namespace {

void run_plain(ckpt::ByteView data) {
    ckpt::ValueArena arena;
    ckpt::PickleHooks hooks;
    try {
        ckpt::PickleResult r = ckpt::run_pickle(data, arena, hooks, "fuzz.pkl");
        (void)ckpt::repr(r.root);
    } catch (const ckpt::Error&) {
    }
}

void run_torch(ckpt::ByteView data, bool trace) {
    ckpt::ValueArena arena;
    std::vector<ckpt::StorageInfo> storages;
    std::vector<ckpt::TensorInfo> tensors;
    std::vector<ckpt::GlobalRef> globals;
    std::vector<ckpt::Problem> problems;
    ckpt::TorchHooks hooks(arena, storages, tensors, globals, problems, "data.pkl");
    if (trace) hooks.reserve(64);  // storage keys 0 … 64 by their number (DecimalIndex), as a torch.save archive's
    ckpt::PickleTrace t;
    try {
        ckpt::PickleResult r =
            ckpt::run_pickle(data, arena, hooks, "data.pkl", 0, {}, trace ? &t : nullptr);
        (void)ckpt::repr(r.root);
        for (const auto& s : t.key_sites) (void)ckpt::traced_opcode_length(data, s.pos);
        for (const auto& g : t.string_gets) (void)ckpt::traced_opcode_length(data, g.pos);
        for (uint64_t f : t.frames) (void)ckpt::traced_opcode_length(data, f);
    } catch (const ckpt::Error&) {
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    ckpt::ByteView view{data, size};
    run_plain(view);
    run_torch(view, false);
    run_torch(view, true);
    return 0;
}
