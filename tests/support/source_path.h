// Paths of files in the source tree (goldens, examples) for tests, from KVZIP_SOURCE_DIR.
#pragma once
#include <string>
#include <string_view>

namespace kvzip::test {

// KVZIP_SOURCE_DIR + "/" + rel. Built by append in its own translation unit: GCC 12's string
// checks misfire on `std::string(LITERAL) + "..."` depending on the literal's length, that is on
// where the checkout lies.
std::string source_path(std::string_view rel);

}  // namespace kvzip::test
