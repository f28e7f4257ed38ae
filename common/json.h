// JSON for kvzip: nlohmann/json (Debian nlohmann-json3-dev) behind two project rules, shared by the
// SQuAD reader (eval/), the CLI's questions files and JSON-lines output, the Hugging Face loader
// and the server:
//  - parse_json: strict RFC 8259 (no comments, no trailing commas, no raw control characters,
//    valid UTF-8 inside strings, \u escapes with surrogate pairs joined), nesting limited to
//    kJsonMaxDepth so hostile input cannot build a pathological tree, and errors are
//    kvzip::Error(Errc::invalid_argument) naming the source and the byte offset.
//  - json_quote / Json::dump never fail on bytes that are not UTF-8: they become U+FFFD.
// Objects keep their keys sorted (nlohmann's default); a duplicated key keeps its last value.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace kvzip {

using Json = nlohmann::json;

inline constexpr uint32_t kJsonMaxDepth = 256;

// Parses `text`: the whole input must be one JSON value, surrounded by optional whitespace.
// `source` names the input in error messages (a path, "path:line", "request body").
Json parse_json(std::string_view text, const std::string& source);

// "null", "a boolean", "a number", "a string", "an array", "an object" (for error messages).
const char* json_type_name(const Json& v);

// `v` as compact JSON text; invalid UTF-8 in strings is written as U+FFFD instead of throwing.
std::string json_dump(const Json& v);
// `s` as a JSON string literal, quotes included (json_dump of a string).
std::string json_quote(std::string_view s);

}  // namespace kvzip
