// map_file / unmap_file (see mapped_file.h): open, fstat (regular files only), mmap, close.
#include "model/detail/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace kvzip::detail {

FileMapping map_file(const std::string& path, const std::string& error_prefix) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    throw Error(e == ENOENT ? Errc::not_found : Errc::io,
                error_prefix + "cannot open: " + std::strerror(e));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(Errc::io, error_prefix + "not a regular file");
  }
  FileMapping m;
  m.size = uint64_t(st.st_size);
  if (m.size > 0) {
    void* addr = mmap(nullptr, size_t(m.size), PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      throw Error(Errc::io, error_prefix + "mmap failed: " + std::strerror(e));
    }
    m.addr = addr;
  }
  ::close(fd);
  return m;
}

void unmap_file(void* addr, uint64_t size) noexcept {
  if (addr) munmap(addr, size_t(size));
}

}  // namespace kvzip::detail
