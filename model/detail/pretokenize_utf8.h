// UTF-8 scanning shared by the tokenizer's input handling and its streaming decoder. "Valid" is
// the Unicode definition (Table 3-7): no overlong forms, no surrogates, nothing above U+10FFFF.
#pragma once
#include <cstddef>
#include <string_view>

namespace kvzip::detail {

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

}  // namespace kvzip::detail
