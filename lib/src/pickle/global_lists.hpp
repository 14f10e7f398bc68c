// The lists GlobalPolicy (globals.cpp) judges by. Names are canonical full names
// (`module.qualname`, the module read through canonical_module), looked up exactly or by dotted
// prefix: an entry `os` covers `os.system` and `os.path.join`, `torch.hub` covers `torch.hub.load`.
#pragma once

#include <string_view>

namespace ckpt::global_lists {

struct Entry {
    std::string_view name;
    std::string_view why;  // one line for reports
};

// torch.load(weights_only=True)'s own allow-list: torch 2.6's and 1.13's together.
bool torch_weights_only(std::string_view full);
// The names of that list only torch 2.6 allows (1.13's is the rest but for _rebuild_sparse_csr_tensor,
// which only 1.13 has).
bool torch_weights_only_2_6_only(std::string_view full);
// torch 2.6 also loads these once torch.nested / torch._dynamo / torch.distributed.tensor is imported.
const Entry* torch_when_imported(std::string_view full);
// Reviewed data-only names beyond torch's list; nullptr when `full` is none.
const Entry* reviewed_data(std::string_view full);
// Names that run code or reach the system, matched by dotted prefix; nullptr when none matches.
const Entry* denied(std::string_view full);
// A top-level module of the Python standard library (3.11 and 3.13, and Python 2's names).
bool stdlib_module(std::string_view root);
// A top-level module of a framework whose internals are gadget surface too (torch, numpy).
bool framework_module(std::string_view root);
// Names of modules that give a whole system's reach when an attribute walk arrives at one
// (`pathlib.os`, `argparse._sys`), and of functions that run code wherever they are found.
bool dangerous_attribute(std::string_view part);

// For the tests: nullptr when every list is sorted where it is searched and no name is denied twice,
// else what is wrong.
const char* check_lists();

}  // namespace ckpt::global_lists
