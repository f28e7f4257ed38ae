// parse_json / json_dump: nlohmann/json with kvzip's error type, depth limit and UTF-8 policy
// (common/json.h).
#include "common/json.h"

#include "common/error.h"

namespace kvzip {

namespace {

// nlohmann's messages start with "[json.exception.parse_error.101] parse error at line 1, column
// 5: "; users need the part after the exception id.
std::string strip_exception_id(const char* what) {
  std::string s = what;
  if (!s.empty() && s[0] == '[') {
    const size_t close = s.find("] ");
    if (close != std::string::npos) s.erase(0, close + 2);
  }
  return s;
}

}  // namespace

Json parse_json(std::string_view text, const std::string& source) {
  // The callback sees every value as it opens; refusing past the limit stops the parse before a
  // deeper level is built.
  const Json::parser_callback_t limit_depth = [&source](int depth, Json::parse_event_t event,
                                                        Json&) {
    if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) &&
        depth >= static_cast<int>(kJsonMaxDepth))
      throw Error(Errc::invalid_argument, source + ": JSON nesting deeper than " +
                                              std::to_string(kJsonMaxDepth) + " levels");
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), limit_depth, /*allow_exceptions=*/true,
                       /*ignore_comments=*/false);
  } catch (const Json::exception& e) {  // parse_error, and out_of_range for a number like 1e400
    throw Error(Errc::invalid_argument,
                source + ": invalid JSON (" + strip_exception_id(e.what()) + ")");
  }
}

const char* json_type_name(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float: return "a number";
    case Json::value_t::string: return "a string";
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    case Json::value_t::binary: return "binary data";
    case Json::value_t::discarded: return "a discarded value";
  }
  return "an unknown value";
}

std::string json_dump(const Json& v) {
  return v.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

std::string json_quote(std::string_view s) { return json_dump(Json(std::string(s))); }

}  // namespace kvzip
