// A small JSON reader and string quoting, shared by the SQuAD reader (eval/) and the CLI's
// questions files and JSON-lines output: parses a whole text into a value tree. Strict RFC 8259: no comments, no trailing commas, no control characters in strings,
// \u escapes decoded to UTF-8 (surrogate pairs joined; a lone surrogate is an error). Object keys
// keep their file order; duplicates are kept too (find() returns the first). Nesting is limited
// to kJsonMaxDepth so a hostile file cannot exhaust the stack. Errors are Errc::invalid_argument with
// the line and column of the offending byte.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvzip {

enum class JsonType : uint8_t { Null, Bool, Number, String, Array, Object };

const char* json_type_name(JsonType t);  // "null", "a boolean", "a number", "a string", ...

struct JsonValue {
  JsonType type = JsonType::Null;
  bool boolean = false;
  double number = 0.0;
  std::string string;                                  // String
  std::vector<JsonValue> array;                        // Array
  std::vector<std::pair<std::string, JsonValue>> object;  // Object, in file order

  // The first member named `key` of an object, or nullptr (also for non-objects).
  const JsonValue* find(std::string_view key) const;
};

inline constexpr uint32_t kJsonMaxDepth = 256;

// Parses `text` (the whole input must be one JSON value, surrounded by optional whitespace).
// `source` names the input in error messages (e.g. the file path).
// The parser reads bytes as UTF-8 inside strings but does not validate them: callers that need
// valid UTF-8 (every current one) check the whole text first.
JsonValue parse_json(std::string_view text, const std::string& source);

// `s` as a JSON string literal, quotes included: '"', '\\' and control characters escaped,
// other bytes (UTF-8) passed through. parse_json(json_quote(s)) gives back s.
std::string json_quote(std::string_view s);

}  // namespace kvzip
