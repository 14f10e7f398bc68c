// Private to the library: the scalars of a YAML document's block mappings, by dotted path
// ("num_layers", "config.num_layers"): what a checkpoint's config file (NeMo's model_config.yaml,
// NeMo 2's context/model.yaml) says of the model's shape. Only block mappings are followed:
// sequences, flow collections ([…], {…}), block scalars (| >) and what is nested in them are
// skipped, and their keys are not given. A value is the scalar's text, unquoted; null and ~ are left
// out. No YAML library is among this project's packages; nothing here runs or resolves anything
// (tags and anchors stay text).
#pragma once

#include <map>
#include <string>
#include <string_view>

namespace ckpt {

// `path` names the file in errors: a document of more than 1,000,000 lines or nested deeper than
// 64 mappings is Error(limit).
std::map<std::string, std::string> yaml_scalars(std::string_view text, const std::string& path);

}  // namespace ckpt
