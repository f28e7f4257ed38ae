// Escaping for strings read from files (never trusted to be valid UTF-8): used by the inspect
// dumps of .kvz (describe.cc) and .kvh (head_scores_describe.cc) files.
#pragma once
#include <string>

namespace kvzip::format::detail {

// Text-safe copy: control bytes and invalid UTF-8 become \xNN (text) or U+FFFD / \u00NN (JSON);
// with json = true the result is the inside of a JSON string literal (no quotes added).
std::string escape(const std::string& s, bool json);

}  // namespace kvzip::format::detail
