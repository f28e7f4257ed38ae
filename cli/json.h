// Minimal JSON helpers for the CLI's line-oriented I/O: escaping strings for output and reading
// one string field from a JSON-lines object (questions files). Not a general JSON parser.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace kvzip::cli {

// `s` as a JSON string literal, quotes included (control characters escaped; UTF-8 passed through).
std::string json_string(std::string_view s);

// The value of the string field `key` at the top level of the JSON object in `line`, or nullopt
// when the field is absent. Throws Errc::invalid_argument when the line is not a JSON object or
// the field is not a string.
std::optional<std::string> json_string_field(std::string_view line, std::string_view key);

}  // namespace kvzip::cli
