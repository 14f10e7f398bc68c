// Optimizer state_dict()s inside a checkpoint: {"state": {int: {...}}, "param_groups": [{"params":
// [...], "lr": …}, …]}, at the top level or nested in dicts and lists up to three levels down
// (`optimizer`, Lightning's `optimizer_states[0]`, …).
#pragma once

#include <string>
#include <vector>

#include "ckpt/value.hpp"

namespace ckpt {

struct OptimizerRef {
    std::string key;  // dotted path ("optimizer", "optimizer_states.0")
    const Value* value = nullptr;
    const Value* state() const { return value->get("state"); }
    const Value* param_groups() const { return value->get("param_groups"); }
};

std::vector<OptimizerRef> find_optimizers(const Value* root);

}  // namespace ckpt
