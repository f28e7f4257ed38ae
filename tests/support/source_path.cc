// Paths of files in the source tree for tests (source_path.h).
#include "tests/support/source_path.h"

namespace kvzip::test {

std::string source_path(std::string_view rel) {
  std::string path = KVZIP_SOURCE_DIR;
  path.append("/").append(rel);
  return path;
}

}  // namespace kvzip::test
