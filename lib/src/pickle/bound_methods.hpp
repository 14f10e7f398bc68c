// builtins.getattr as pickle writes a bound method: getattr(obj, 'name'). torch 1.x's OneCycleLR and
// CyclicLR keep one in their state_dict() (their anneal/scale function), so real training
// checkpoints name getattr, the exploits' favourite gadget. Python 3.11+ writes an enum member the
// same way, getattr(cls, 'NAME'): DeepSpeed's ZeroStageEnum and DCP's memory-format enum are counted too. A pickle's uses of getattr are counted
// here, by the VM's hooks of every reader (scan's, and the checkpoint reader's for inspect and verify):
// when each use is a method of an object of torch's own classes, stored and not called while loading,
// getattr is judged benign there (globals.hpp: bound_method_verdict).
#pragma once

#include <cstdint>
#include <string>

#include "ckpt/value.hpp"

namespace ckpt {

class BoundMethods {
public:
    // Every REDUCE / NEWOBJ the VM makes (its callable and arguments).
    void reduce(const Value* made);
    // A value made while unpickling that is then called or changed in place.
    void used(const Value* v);
    // How often getattr made a bound method of one of torch's classes (or a reviewed enum's member),
    // when that was all it did.
    uint64_t only_methods() const { return m_other ? 0 : m_methods; }
    const std::string& example() const { return m_example; }  // "torch.optim.lr_scheduler.OneCycleLR._annealing_cos"

private:
    uint64_t m_methods = 0, m_other = 0;
    std::string m_example;
};

}  // namespace ckpt
