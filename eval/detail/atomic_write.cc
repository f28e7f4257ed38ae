// write_atomic (see atomic_write.h).
#include "eval/detail/atomic_write.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "common/error.h"

namespace kvzip::eval::detail {

void write_atomic(const std::string& path, std::string_view bytes) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw Error(Errc::io, "cannot create " + tmp + ": " + std::strerror(errno));
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  if (std::fclose(f) != 0 || !ok) {
    std::remove(tmp.c_str());
    throw Error(Errc::io, "cannot write " + tmp + " (disk full?)");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw Error(Errc::io, "cannot rename " + tmp + " to " + path + ": " + ec.message());
  }
}

}  // namespace kvzip::eval::detail
