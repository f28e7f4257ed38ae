// UTF-8 classification by the well-formed byte sequences of Unicode Table 3-7: the lead byte fixes
// the length and the allowed range of the second byte; later bytes are plain continuations.
#include "common/utf8.h"

namespace kvzip {

Utf8Step utf8_step(std::string_view s, size_t i) {
  auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) return {Utf8Status::ok, 1};
  size_t len = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;  // no overlongs
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;  // no overlongs
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return {Utf8Status::invalid, 1};  // continuation byte, C0/C1 or F5..FF as a lead
  }
  for (size_t k = 1; k < len; ++k) {
    if (i + k >= s.size()) return {Utf8Status::incomplete, k};
    auto b = static_cast<uint8_t>(s[i + k]);
    uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) return {Utf8Status::invalid, k};
  }
  return {Utf8Status::ok, len};
}

size_t utf8_valid_run(std::string_view s, size_t i) {
  size_t j = i;
  while (j < s.size()) {
    // ASCII fast path: most text is mostly ASCII.
    if (static_cast<uint8_t>(s[j]) < 0x80) {
      ++j;
      continue;
    }
    Utf8Step st = utf8_step(s, j);
    if (st.status != Utf8Status::ok) break;
    j += st.len;
  }
  return j - i;
}

uint32_t utf8_decode(std::string_view s, size_t i, size_t* len) {
  const Utf8Step st = utf8_step(s, i);
  if (st.status != Utf8Status::ok) {
    *len = 1;
    return kNoCodePoint;
  }
  *len = st.len;
  const auto b0 = static_cast<uint8_t>(s[i]);
  uint32_t cp = st.len == 1   ? b0
                : st.len == 2 ? (b0 & 0x1Fu)
                : st.len == 3 ? (b0 & 0x0Fu)
                              : (b0 & 0x07u);
  for (size_t k = 1; k < st.len; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3Fu);
  return cp;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace kvzip
