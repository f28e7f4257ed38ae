// UTF-8, once for the whole project: classification by the well-formed byte sequences of Unicode
// Table 3-7 (no overlong forms, no surrogates, nothing above U+10FFFF), validation, decoding and
// encoding of code points. Used by the tokenizer (input checks, byte-level alphabet, streaming
// decoder), the CLI's text checks, eval's SQuAD reader and the inspect dumps' escaping.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvzip {

enum class Utf8Status { ok, invalid, incomplete };

struct Utf8Step {
  Utf8Status status;
  size_t len;  // ok: sequence length; invalid: the maximal ill-formed subpart (>= 1);
               // incomplete: bytes present (a valid prefix cut off by the end of the text)
};

// Classifies the sequence starting at s[i] (i < s.size()).
Utf8Step utf8_step(std::string_view s, size_t i);

// Length of the longest valid prefix of s[i..] (whole sequences only).
size_t utf8_valid_run(std::string_view s, size_t i);

// True when `text` is well-formed UTF-8.
inline bool is_valid_utf8(std::string_view text) { return utf8_valid_run(text, 0) == text.size(); }

// The code point of the sequence at s[i] with its length in *len, or kNoCodePoint with *len = 1
// when the bytes there are not a well-formed sequence.
inline constexpr uint32_t kNoCodePoint = 0xFFFFFFFFu;
uint32_t utf8_decode(std::string_view s, size_t i, size_t* len);

// Appends the UTF-8 encoding of code point cp (< 0x110000, not a surrogate) to out.
void append_utf8(std::string& out, uint32_t cp);

}  // namespace kvzip
