// JSON string escaping and a small recursive-descent scanner that walks one object's top-level
// members (skipping nested values) to find a string field.
#include "cli/json.h"

#include <cstdint>
#include <cstdio>

#include "common/error.h"

namespace kvzip::cli {

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

namespace {

struct Scanner {
  std::string_view s;
  size_t i = 0;

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(Errc::invalid_argument, "questions file: bad JSON line (" + what + " at column " +
                                            std::to_string(i + 1) + ")");
  }
  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) ++i;
  }
  bool eat(char c) {
    ws();
    if (i < s.size() && s[i] == c) return ++i, true;
    return false;
  }
  static void put_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6)), out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12)), out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18)), out += char(0x80 | ((cp >> 12) & 0x3F));
      out += char(0x80 | ((cp >> 6) & 0x3F)), out += char(0x80 | (cp & 0x3F));
    }
  }
  uint32_t hex4() {
    if (i + 4 > s.size()) fail("short \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s[i++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= c - '0';
      else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
      else fail("bad \\u escape");
    }
    return v;
  }
  std::string string() {
    ws();
    if (i >= s.size() || s[i] != '"') fail("expected a string");
    ++i;
    std::string out;
    while (true) {
      if (i >= s.size()) fail("unterminated string");
      const char c = s[i++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i >= s.size()) fail("unterminated escape");
      const char e = s[i++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00 && i + 1 < s.size() && s[i] == '\\' && s[i + 1] == 'u') {
            i += 2;
            const uint32_t lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) fail("bad surrogate pair");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          put_utf8(out, cp);
          break;
        }
        default: fail("unknown escape");
      }
    }
  }
  void skip_value(int depth = 0) {
    if (depth > 64) fail("nesting too deep");
    ws();
    if (i >= s.size()) fail("expected a value");
    const char c = s[i];
    if (c == '"') {
      string();
    } else if (c == '{' || c == '[') {
      const char close = c == '{' ? '}' : ']';
      ++i;
      if (eat(close)) return;
      do {
        if (c == '{') {
          string();
          if (!eat(':')) fail("expected ':'");
        }
        skip_value(depth + 1);
      } while (eat(','));
      if (!eat(close)) fail("expected ',' or closing bracket");
    } else {
      while (i < s.size() && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] != ' ') ++i;
    }
  }
};

}  // namespace

std::optional<std::string> json_string_field(std::string_view line, std::string_view key) {
  Scanner sc{line};
  if (!sc.eat('{')) sc.fail("expected an object");
  std::optional<std::string> found;
  if (sc.eat('}')) return found;
  do {
    const std::string k = sc.string();
    if (!sc.eat(':')) sc.fail("expected ':'");
    if (k == key) {
      sc.ws();
      if (sc.i >= line.size() || line[sc.i] != '"')
        throw Error(Errc::invalid_argument,
                    "questions file: field \"" + std::string(key) + "\" is not a string");
      found = sc.string();
    } else {
      sc.skip_value();
    }
  } while (sc.eat(','));
  if (!sc.eat('}')) sc.fail("expected ',' or '}'");
  return found;
}

}  // namespace kvzip::cli
