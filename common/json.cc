// Recursive-descent JSON parser (see json.h). Positions in errors are 1-based line and column
// (column counted in bytes), computed only when an error is raised.
#include "common/json.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "common/error.h"

namespace kvzip {
namespace {

class Parser {
 public:
  Parser(std::string_view text, const std::string& source) : s_(text), source_(source) {}

  JsonValue parse_document() {
    skip_ws();
    JsonValue v = parse_value(0);
    skip_ws();
    if (pos_ != s_.size()) fail("unexpected text after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void fail_at(size_t at, const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw Error(Errc::invalid_argument, source_ + ": line " + std::to_string(line) + ", column " +
                                            std::to_string(col) + ": " + what);
  }
  [[noreturn]] void fail(const std::string& what) const { fail_at(pos_, what); }

  std::string found() const {
    if (pos_ >= s_.size()) return "the end of the input";
    const unsigned char c = static_cast<unsigned char>(s_[pos_]);
    if (c >= 0x20 && c < 0x7f) return std::string("'") + char(c) + "'";
    return "byte 0x" + std::string(1, "0123456789abcdef"[c >> 4]) + "0123456789abcdef"[c & 15];
  }

  void skip_ws() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }

  void expect(char c, const char* what) {
    if (pos_ >= s_.size() || s_[pos_] != c) fail(std::string("expected ") + what + ", found " + found());
    ++pos_;
  }

  JsonValue parse_value(uint32_t depth) {
    if (depth >= kJsonMaxDepth)
      fail("nesting deeper than " + std::to_string(kJsonMaxDepth) + " levels");
    if (pos_ >= s_.size()) fail("expected a value, found the end of the input");
    JsonValue v;
    switch (s_[pos_]) {
      case '{': parse_object(v, depth); break;
      case '[': parse_array(v, depth); break;
      case '"':
        v.type = JsonType::String;
        v.string = parse_string();
        break;
      case 't': literal("true", v, JsonType::Bool, true); break;
      case 'f': literal("false", v, JsonType::Bool, false); break;
      case 'n': literal("null", v, JsonType::Null, false); break;
      default:
        if (s_[pos_] == '-' || (s_[pos_] >= '0' && s_[pos_] <= '9')) {
          v.type = JsonType::Number;
          v.number = parse_number();
        } else {
          fail("expected a value, found " + found());
        }
    }
    return v;
  }

  void literal(std::string_view word, JsonValue& v, JsonType type, bool b) {
    if (s_.substr(pos_, word.size()) != word)
      fail("expected a value, found " + found());
    pos_ += word.size();
    v.type = type;
    v.boolean = b;
  }

  void parse_object(JsonValue& v, uint32_t depth) {
    v.type = JsonType::Object;
    ++pos_;  // '{'
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
      return;
    }
    while (true) {
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != '"') fail("expected a member name (a string), found " + found());
      std::string key = parse_string();
      skip_ws();
      expect(':', "':' after a member name");
      skip_ws();
      JsonValue member = parse_value(depth + 1);
      v.object.emplace_back(std::move(key), std::move(member));
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      expect('}', "',' or '}' in an object");
      return;
    }
  }

  void parse_array(JsonValue& v, uint32_t depth) {
    v.type = JsonType::Array;
    ++pos_;  // '['
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      return;
    }
    while (true) {
      skip_ws();
      v.array.push_back(parse_value(depth + 1));
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      expect(']', "',' or ']' in an array");
      return;
    }
  }

  uint32_t hex4() {
    if (pos_ + 4 > s_.size()) fail("\\u escape needs 4 hex digits");
    uint32_t u = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[pos_++];
      u <<= 4;
      if (c >= '0' && c <= '9') u |= uint32_t(c - '0');
      else if (c >= 'a' && c <= 'f') u |= uint32_t(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') u |= uint32_t(c - 'A' + 10);
      else fail_at(pos_ - 1, "\\u escape needs 4 hex digits");
    }
    return u;
  }

  static void put_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3F));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    }
  }

  // A \u escape (the backslash and 'u' already read), joining a surrogate pair.
  uint32_t unicode_escape() {
    const size_t at = pos_ - 2;
    uint32_t cp = hex4();
    if (cp >= 0xDC00 && cp <= 0xDFFF) fail_at(at, "lone low surrogate in a \\u escape");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (s_.substr(pos_, 2) != "\\u") fail_at(at, "high surrogate not followed by a \\u low surrogate");
      pos_ += 2;
      const uint32_t lo = hex4();
      if (lo < 0xDC00 || lo > 0xDFFF) fail_at(at, "high surrogate not followed by a low surrogate");
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    return cp;
  }

  std::string parse_string() {
    const size_t open = pos_;
    ++pos_;  // '"'
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) fail_at(open, "string not closed before the end of the input");
      const unsigned char c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20) fail("control character (byte 0x" + std::string(1, "0123456789abcdef"[c >> 4]) +
                         "0123456789abcdef"[c & 15] + ") inside a string; it must be escaped");
      if (c != '\\') {
        out += char(c);
        ++pos_;
        continue;
      }
      if (pos_ + 1 >= s_.size()) fail("escape at the end of the input");
      const char e = s_[pos_ + 1];
      pos_ += 2;
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': put_utf8(out, unicode_escape()); break;
        default: fail_at(pos_ - 2, std::string("unknown escape \\") + e);
      }
    }
  }

  double parse_number() {
    const size_t start = pos_;
    auto digits = [&] {
      const size_t d0 = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      return pos_ - d0;
    };
    if (s_[pos_] == '-') ++pos_;
    if (pos_ < s_.size() && s_[pos_] == '0') {
      ++pos_;
    } else if (digits() == 0) {
      fail("expected digits in a number");
    }
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (digits() == 0) fail("expected digits after the decimal point");
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (digits() == 0) fail("expected digits in the exponent");
    }
    const std::string text(s_.substr(start, pos_ - start));
    errno = 0;
    const double d = std::strtod(text.c_str(), nullptr);
    if (errno == ERANGE && std::isinf(d)) fail_at(start, "number " + text + " is out of range");
    return d;
  }

  std::string_view s_;
  const std::string& source_;
  size_t pos_ = 0;
};

}  // namespace

const char* json_type_name(JsonType t) {
  switch (t) {
    case JsonType::Null: return "null";
    case JsonType::Bool: return "a boolean";
    case JsonType::Number: return "a number";
    case JsonType::String: return "a string";
    case JsonType::Array: return "an array";
    case JsonType::Object: return "an object";
  }
  return "?";
}

const JsonValue* JsonValue::find(std::string_view key) const {
  for (const auto& [k, v] : object)
    if (k == key) return &v;
  return nullptr;
}

JsonValue parse_json(std::string_view text, const std::string& source) {
  return Parser(text, source).parse_document();
}

std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", c);
      out += esc;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

}  // namespace kvzip
