// FileImage (see mapped_file.h): open, fstat (regular files only), mmap, close; or an owned buffer.
#include "model/detail/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "common/error.h"

namespace kvzip::model::detail {

FileImage FileImage::map(const std::string& path, const std::string& error_prefix) {
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
  FileImage m;
  m.size_ = uint64_t(st.st_size);
  if (m.size_ > 0) {
    void* addr = mmap(nullptr, size_t(m.size_), PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) {
      const int e = errno;
      ::close(fd);
      throw Error(Errc::io, error_prefix + "mmap failed: " + std::strerror(e));
    }
    m.map_ = addr;
    m.map_size_ = m.size_;
    m.data_ = static_cast<const uint8_t*>(addr);
  }
  ::close(fd);
  return m;
}

FileImage::FileImage(std::vector<uint8_t> bytes)
    : owned_(std::move(bytes)), data_(owned_.data()), size_(owned_.size()) {}

// A moved vector keeps its buffer, so data_ stays valid whichever storage holds the bytes.
FileImage::FileImage(FileImage&& o) noexcept
    : map_(std::exchange(o.map_, nullptr)),
      map_size_(std::exchange(o.map_size_, 0)),
      owned_(std::move(o.owned_)),
      data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)) {}

FileImage& FileImage::operator=(FileImage&& o) noexcept {
  if (this != &o) {
    if (map_) munmap(map_, size_t(map_size_));
    map_ = std::exchange(o.map_, nullptr);
    map_size_ = std::exchange(o.map_size_, 0);
    owned_ = std::move(o.owned_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

FileImage::~FileImage() {
  if (map_) munmap(map_, size_t(map_size_));
}

}  // namespace kvzip::model::detail
