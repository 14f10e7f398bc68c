// Pieces every report shares: the tool's identity and human-readable units.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ckpt {

constexpr int k_schema_version = 1;
const char* tool_version();

// {"name": "ckpt-tool", "version": "…"}
nlohmann::json tool_json();

// 1536 → "1.5 KiB"; bytes below 1 KiB as "123 B".
std::string human_bytes(uint64_t bytes);
// 11689512 → "11.69 M"
std::string human_count(uint64_t n);
// {64, 3, 7, 7} → "64×3×7×7"; {} → "()"
std::string shape_text(const std::vector<int64_t>& shape);

// ANSI colour for text reports, or nothing: paint("31", "text") is red when `on`.
struct Paint {
    bool on;
    std::string operator()(const char* code, const std::string& s) const {
        return on ? std::string("\033[") + code + "m" + s + "\033[0m" : s;
    }
};

// The JSON in `path` when the file starts like JSON ('{' or '[' after whitespace or a UTF-8 BOM),
// nullopt when it does not (a checkpoint); Error(format) naming the file when it starts like JSON
// but does not parse.
std::optional<nlohmann::json> read_json_file(const std::string& path);

// `j[name]` when `j` is an object holding a string there, `fallback` otherwise: for the optional
// fields of files we read (nlohmann's value() throws a type_error when the field is another type).
std::string json_string_or(const nlohmann::json& j, const char* name, std::string fallback = {});

// A word for the shell: as it is when it is plain, single-quoted otherwise.
std::string shell_quote(const std::string& s);
// The exact `ckpt-tool strip-prefix` command line that repairs `file`: strips `strip` (none: the
// default wrapper prefixes), then adds `add`; writes beside the input as NAME_stripped.EXT.
std::string strip_prefix_command(const std::string& file, const std::string& state_dict_path,
                                 const std::vector<std::string>& strip, const std::string& add);

}  // namespace ckpt
