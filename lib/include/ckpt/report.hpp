// Pieces every report shares: the tool's identity and human-readable units.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/bytes.hpp"
#include "ckpt/checkpoint.hpp"

namespace ckpt {

constexpr int k_schema_version = 1;
const char* tool_version();

// {"name": "ckpt-tool", "version": "…"}
nlohmann::json tool_json();
// What every --json report opens with: {"schema_version", "tool", "command"}; the command adds the rest.
nlohmann::json report_head(const char* command);

// 1536 → "1.5 KiB"; bytes below 1 KiB as "123 B".
std::string human_bytes(uint64_t bytes);
// 11689512 → "11.69 M"
std::string human_count(uint64_t n);
// {64, 3, 7, 7} → "64×3×7×7"; {} → "()"
std::string shape_text(const std::vector<int64_t>& shape);
// A tensor's shape as a table shows it: "4×4 sparse_coo", "3×4 meta", "nested 2×3, 4×3", "8 qint8 per_tensor_affine".
std::string tensor_shape_text(const Checkpoint& c, const TensorInfo& t);

// ANSI colour for text reports, or nothing: paint("31", "text") is red when `on`.
// How a text report is rendered (every command's render_text).
struct TextStyle {
    bool color = false;
};

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
// The JSON text of a file's bytes by the same test (from its first '{' or '['), nullopt when they
// do not start like JSON.
std::optional<ByteView> json_text(ByteView bytes);
// The Error(format) naming `path` for JSON text that does not parse at `byte`, or holds a number
// past a double's range (both readers of JSON files say it alike).
[[noreturn]] void json_parse_failed(const std::string& path, uint64_t byte, bool number_out_of_range);

// `j[name]` when `j` is an object holding a string there, `fallback` otherwise: for the optional
// fields of files we read (nlohmann's value() throws a type_error when the field is another type).
std::string json_string_or(const nlohmann::json& j, const char* name, std::string fallback = {});
// Appends `key: value` to an ordered object whose keys the caller knows to be new (tensor names of
// a header). ordered_json's operator[] searches the object first: quadratic in the members.
void append_new_member(nlohmann::ordered_json& object, std::string key, nlohmann::ordered_json value);

// Appends `s` as a JSON string, as nlohmann's dump writes it: between quotes as it is when nothing
// in it needs an escape (the usual name), through dump otherwise. Invalid UTF-8 becomes U+FFFD when
// `replace_invalid`, else throws nlohmann's type_error, as dump does.
void append_json_string(std::string& out, std::string_view s, bool replace_invalid);

// A word for the shell: as it is when it is plain, single-quoted otherwise.
std::string shell_quote(const std::string& s);
// The exact `ckpt-tool strip-prefix` command line that repairs `file`: strips `strip` (none: the
// default wrapper prefixes), then adds `add`; writes beside the input as NAME_stripped.EXT.
std::string strip_prefix_command(const std::string& file, const std::string& state_dict_path,
                                 const std::vector<std::string>& strip, const std::string& add);

// GitHub Actions workflow commands (`--format github`): `::error file=F,title=T::MESSAGE`.
//
// `s` escaped as GitHub's toolkit escapes it (actions/toolkit, packages/core/src/command.ts): `%`,
// CR and LF become `%25`, `%0D`, `%0A`; in a property value (`property`: file, title) `:` and `,`
// too (`%3A`, `%2C`), which would otherwise end the value.
std::string github_escape(std::string_view s, bool property);

// One annotation: `level` is "error" (a finding that makes exit 1), "warning" (one that does not) or
// "notice" (advice, such as diff-keys' prefix fix); `file` the path as the user gave it.
struct Annotation {
    std::string level, file, title, message;
};

// "::LEVEL file=F,title=T::MESSAGE", escaped; an empty property is left out, as the toolkit does.
std::string github_command(const Annotation& a);

// GitHub shows only the first annotations of a step anyway; past the cap a run says how many more.
constexpr size_t k_github_annotation_cap = 50;

// The annotations of one command run, one workflow command a line, in order: at most `cap` of them;
// when there are more, one ::warning saying how many findings were left out (file: theirs when they
// all have one) and to run with --json for all; then one plain summary line, not a workflow command:
// "ckpt-tool COMMAND: no findings", "ckpt-tool COMMAND: E errors, W warnings" (annotations by level),
// and past the cap ", N not annotated (--json lists all)".
void render_github(const std::vector<Annotation>& annotations, const std::string& command, std::ostream& out,
                   size_t cap = k_github_annotation_cap);

}  // namespace ckpt
