// Writes a whole output file (CSV, SVG, JSONL) through PATH.tmp and a rename, so a failed or interrupted
// write never leaves a partial file under the final name.
#pragma once
#include <string>
#include <string_view>

namespace kvzip::eval::detail {

// Errc::io naming the path when the file cannot be created, written or renamed.
void write_atomic(const std::string& path, std::string_view bytes);

}  // namespace kvzip::eval::detail
