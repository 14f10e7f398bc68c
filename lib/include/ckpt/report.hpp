// Pieces every report shares: the tool's identity and human-readable units.
#pragma once

#include <cstdint>
#include <functional>
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

// Writes `doc` exactly as doc.dump(indent) lays it out, then a newline, through `sink` in pieces
// of about 64 KiB, with each member named in `arrays` (an empty array at the top level of `doc`)
// filled by its function, which hands over one row at a time: a report or fingerprint of 100,000
// tensors is never one document (~1.5 KB a row as nlohmann's tree) in memory.
using JsonRowSink = std::function<void(const nlohmann::json&)>;
using JsonRows = std::function<void(const JsonRowSink&)>;
void write_json_streamed(const nlohmann::json& doc, int indent, const std::vector<std::pair<std::string, JsonRows>>& arrays,
                         const std::function<void(std::string_view)>& sink);
// The same row appended to `buf` as an element of a top-level member's array ("[" before the first,
// "," before the others), laid out as dump(indent) lays it out there.
void append_json_row(std::string& buf, const nlohmann::json& row, int indent, bool& first);

// 1536 → "1.5 KiB"; bytes below 1 KiB as "123 B".
std::string human_bytes(uint64_t bytes);
// 11689512 → "11.69 M"
std::string human_count(uint64_t n);

// How a text report is rendered (every command's render_text).
struct TextStyle {
    bool color = false;
    bool verbose = false;  // -v: every row where the text otherwise summarises (strip-prefix's renames)
};

// Text from a file (a key, a record, a global, a string value) or a path as a text report shows
// it: a name may hold what a terminal obeys (ESC sequences that recolour, retitle or move the cursor;
// CR, LF; C1 controls; bidirectional overrides). Those are escaped — \n \r \t \e, \xNN for other
// controls and for bytes that are not UTF-8, \u202e for U+0080–U+009F and the bidi controls — and
// everything else is as it was.
std::string shown(std::string_view s);

// ANSI colour, or nothing. The text it paints is shown() first: every text report prints file-borne
// text through it or through shown() itself.
struct Paint {
    bool on;
    std::string operator()(const char* code, std::string_view s) const {
        return on ? std::string("\033[") + code + "m" + shown(s) + "\033[0m" : shown(s);
    }
};

// A word for the shell: as it is when it is plain, single-quoted otherwise, and $'…' with \xNN
// escapes when it holds control characters (so it is printable and still pastes as the same word).
std::string shell_quote(const std::string& s);
// The exact `ckpt-tool strip-prefix` command line that repairs `file`: strips `strip` (none: the
// default wrapper prefixes), then adds `add`; writes beside the input as NAME_stripped.EXT.
std::string strip_prefix_command(const std::string& file, const std::string& state_dict_path,
                                 const std::vector<std::string>& strip, const std::string& add);

// GitHub Actions workflow commands (`--format github`): `::error file=F,title=T::MESSAGE`.
//
// `s` escaped as GitHub's toolkit escapes it (actions/toolkit, packages/core/src/command.ts): `%`,
// CR and LF become `%25`, `%0D`, `%0A`; in a property value (`property`: file, title) `:` and `,`
// too (`%3A`, `%2C`), which would otherwise end the value. Other control characters, C1 controls
// and bidi overrides as shown() writes them (a log renders ANSI sequences).
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
