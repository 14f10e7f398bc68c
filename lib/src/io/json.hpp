// Reading and writing JSON, as every room that does shares it (private to the library): the one test
// for "starts like JSON", the one message for JSON that does not parse, nlohmann's output written
// without its document where a document would be large.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "ckpt/bytes.hpp"

namespace ckpt {

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

}  // namespace ckpt
