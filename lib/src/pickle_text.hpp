// Protocol 0's text arguments: STRING's quoted literal (Python escapes) and UNICODE's
// raw-unicode-escape line, decoded to UTF-8. Private to the pickle VM.
#pragma once

#include <string>
#include <string_view>

namespace ckpt::pickle_text {

// false, with `error` saying why, for a malformed argument.
bool string_literal(std::string_view line, std::string& out, std::string& error);
bool raw_unicode(std::string_view line, std::string& out, std::string& error);

}  // namespace ckpt::pickle_text
