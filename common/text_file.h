// User text read from a file or standard input, with the checks every command applies to a
// document, a question or a calibration text: it exists, is not a directory, is valid UTF-8, holds
// no NUL byte and is not blank. Errors say what was wrong and what to do.
#pragma once
#include <string>

namespace kvzip {

// Reads PATH ("-" = standard input). Errc::not_found/io when unreadable; Errc::invalid_argument
// when PATH is a directory, or the content is empty (or only whitespace) or not valid UTF-8 (with
// the byte offset); `what` ("document", "a question") starts the message.
std::string read_text(const std::string& path, const std::string& what);

// Checks that text is valid UTF-8, has no NUL byte and is not blank; `what` names it in the error.
void check_text(const std::string& text, const std::string& what);

}  // namespace kvzip
