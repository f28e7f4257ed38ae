// Terminal- and JSON-safe copies of untrusted strings from cache and head-scores files (document
// text, tool version, model names): see escape.h.
#include "format/detail/escape.h"

#include <cstdio>

namespace kvzip::format::detail {

// Length of the valid UTF-8 sequence at s[i], or 0.
static size_t utf8_len(const std::string& s, size_t i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
  return n;
}

// Text-safe copy: control bytes and invalid UTF-8 become \xNN (text) or U+FFFD / \u00NN (JSON).
std::string escape(const std::string& s, bool json) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = utf8_len(s, i);
    char buf[8];
    if (json && (c == '"' || c == '\\')) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (!json && c == '"') {
      out += "\\\"";
    } else if (n == 1 && c >= 0x20 && c != 0x7f) {
      out += static_cast<char>(c);
    } else if (n > 1) {
      out.append(s, i, n);
      i += n;
      continue;
    } else if (json) {
      if (n == 0) {
        out += "\\ufffd";
      } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", c);
        out += buf;
      }
    } else {
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    }
    ++i;
  }
  return out;
}

}  // namespace kvzip::format::detail
