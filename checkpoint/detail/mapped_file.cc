// FileImage (see mapped_file.h): open, fstat (regular files only), mmap, close; or the file read
// into anonymous memory; or an owned buffer.
#include "checkpoint/detail/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "common/error.h"

namespace kvzip::model::detail {

namespace {

// An open regular file and its size; closes on scope exit.
struct OpenFile {
  int fd = -1;
  uint64_t size = 0;
  ~OpenFile() {
    if (fd >= 0) ::close(fd);
  }
};

void open_regular(const std::string& path, const std::string& error_prefix, OpenFile& f) {
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) {
    const int e = errno;
    throw Error(e == ENOENT ? Errc::not_found : Errc::io,
                error_prefix + "cannot open: " + std::strerror(e));
  }
  struct stat st {};
  if (fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode))
    throw Error(Errc::io, error_prefix + "not a regular file");
  f.size = uint64_t(st.st_size);
}

}  // namespace

FileImage FileImage::map(const std::string& path, const std::string& error_prefix) {
  OpenFile f;
  open_regular(path, error_prefix, f);
  FileImage m;
  m.size_ = f.size;
  if (m.size_ > 0) {
    void* addr = mmap(nullptr, size_t(m.size_), PROT_READ, MAP_PRIVATE, f.fd, 0);
    if (addr == MAP_FAILED) {
      const int e = errno;
      throw Error(Errc::io, error_prefix + "mmap failed: " + std::strerror(e));
    }
    // Advice only: where the page cache can hold 2 MiB folios (Linux 6.18, ext4: measured), a
    // file first read through this mapping then sits in them and is mapped in 2 MiB pages, as
    // the weights read into memory are (a 0.7 GB file: 100% of it, against 94% without).
    madvise(addr, size_t(m.size_), MADV_HUGEPAGE);
    m.map_ = addr;
    m.map_size_ = m.size_;
    m.data_ = static_cast<const uint8_t*>(addr);
  }
  return m;
}

FileImage FileImage::read(const std::string& path, const std::string& error_prefix) {
  OpenFile f;
  open_regular(path, error_prefix, f);
  FileImage m;
  m.size_ = f.size;
  if (m.size_ == 0) return m;
  // A 2 MiB-aligned run of whole 2 MiB pages inside a reservation one page larger.
  constexpr size_t kHuge = size_t(2) << 20;
  const size_t len = (size_t(m.size_) + kHuge - 1) / kHuge * kHuge;
  void* raw =
      mmap(nullptr, len + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED)
    throw Error(Errc::out_of_memory, error_prefix + "cannot allocate " + std::to_string(m.size_) +
                                         " bytes for the weights: " + std::strerror(errno));
  m.map_ = raw;
  m.map_size_ = len + kHuge;  // the destructor unmaps it all, on the throws below too
  uint8_t* buf = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(raw) + kHuge - 1) &
                                            ~uintptr_t(kHuge - 1));
  madvise(buf, len, MADV_HUGEPAGE);  // advice only: without it the bytes are the same
  for (uint64_t done = 0; done < m.size_;) {
    const size_t want = size_t(std::min<uint64_t>(m.size_ - done, uint64_t(1) << 30));
    const ssize_t got = ::pread(f.fd, buf + done, want, off_t(done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      throw Error(Errc::io,
                  error_prefix + "read failed at byte " + std::to_string(done) + ": " +
                      (got < 0 ? std::strerror(errno) : "the file shrank while it was read"));
    done += uint64_t(got);
  }
  mprotect(raw, m.map_size_, PROT_READ);  // as a mapping: nothing may write the weights
  m.data_ = buf;
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
