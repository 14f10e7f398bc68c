// What a global named in a pickle is, by allow-list first. The pickle VM never calls a global; this
// table only says what a report should make of one.
#pragma once

#include <string_view>

namespace ckpt {

enum class GlobalClass {
    safe,       // rebuilt by this reader as data: torch rebuild functions, storages, dtypes, OrderedDict …
    benign,     // plain data classes common in training checkpoints (argparse.Namespace, numpy scalars)
    unknown,    // not on any list: a custom class; torch.load(weights_only=True) would refuse it
    dangerous,  // would run code or touch the system if a real unpickler called it
};

const char* global_class_name(GlobalClass c);
GlobalClass classify_global(std::string_view module, std::string_view name);
inline bool global_is_known(GlobalClass c) { return c == GlobalClass::safe || c == GlobalClass::benign; }

}  // namespace ckpt
