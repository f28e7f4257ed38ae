// Terminal- and JSON-safe copies of untrusted strings from cache and head-scores files (document
// text, tool version, model names): see escape.h.
#include "format/detail/escape.h"

#include <cstdio>

#include "common/utf8.h"

namespace kvzip::format::detail {

// Text-safe copy: control bytes and invalid UTF-8 become \xNN (text) or U+FFFD / \u00NN (JSON).
std::string escape(const std::string& s, bool json) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    const Utf8Step st = utf8_step(s, i);
    const size_t n = st.status == Utf8Status::ok ? st.len : 0;  // 0: not valid UTF-8 here
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
