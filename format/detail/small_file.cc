// read_small_file (format/detail/small_file.h).
#include "format/detail/small_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "common/error.h"

namespace kvzip::format::detail {

std::vector<uint8_t> read_small_file(const std::string& path, const SmallFileKind& kind) {
  const std::string name = kind.name;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT)
      throw Error(Errc::not_found,
                  name + " " + path + " does not exist; make one with " + kind.make_hint);
    throw Error(Errc::io, "cannot stat " + path + ": " + std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode))
    throw Error(Errc::invalid_argument,
                path + " is a directory, not a " + name + "; give a " + kind.extension + " file");
  if (!S_ISREG(st.st_mode)) throw Error(Errc::io, path + " is not a regular file");
  if (uint64_t(st.st_size) > kind.max_bytes)
    throw Error(Errc::corrupt, path + ": " + std::to_string(st.st_size) +
                                   " bytes is too large for a " + name + " (at most " +
                                   std::to_string(kind.max_bytes) + ")");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(Errc::io, "cannot open " + path + ": " + std::strerror(errno));
  std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (in.gcount() != static_cast<std::streamsize>(bytes.size()))
    throw Error(Errc::io, "reading " + path + ": got " + std::to_string(in.gcount()) + " of " +
                              std::to_string(bytes.size()) + " bytes");
  return bytes;
}

}  // namespace kvzip::format::detail
