// Temporary file + fsync + rename (detail/atomic_file.h). Without force the final step is a
// rename that refuses to replace (renameat2 RENAME_NOREPLACE, or link+unlink where the file
// system lacks it), so a file created meanwhile by someone else is not clobbered either.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "format/detail/atomic_file.h"
#include "format/format.h"

namespace kvzip::format {
namespace {

[[noreturn]] void io_error(const std::string& what, int err) {
  throw Error(Errc::io, what + ": " + std::strerror(err));
}

[[noreturn]] void exists_error(const std::string& path) {
  throw Error(Errc::invalid_argument,
              "output file " + path + " already exists; pass -f (--force) to overwrite it");
}

std::string parent_dir(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

class FdSink final : public Sink {
 public:
  FdSink(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}
  void write(const void* data, size_t size) override {
    auto* p = static_cast<const uint8_t*>(data);
    while (size > 0) {
      ssize_t n = ::write(fd_, p, size);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) io_error("writing " + name_, errno);
      p += n;
      size -= static_cast<size_t>(n);
    }
  }

 private:
  int fd_;
  std::string name_;
};

void move_into_place(const std::string& tmp, const std::string& path, bool force) {
  if (force) {
    if (std::rename(tmp.c_str(), path.c_str()) != 0) io_error("renaming " + tmp + " to " + path, errno);
    return;
  }
  if (renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) == 0) return;
  if (errno == EEXIST) exists_error(path);
  if (errno != EINVAL && errno != ENOSYS) io_error("renaming " + tmp + " to " + path, errno);
  if (::link(tmp.c_str(), path.c_str()) != 0) {
    if (errno == EEXIST) exists_error(path);
    io_error("linking " + tmp + " to " + path, errno);
  }
  ::unlink(tmp.c_str());
}

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // the rename is done; a directory we cannot open cannot be synced either
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

namespace detail {

void create_atomically(const std::string& path, bool force,
                       const std::function<void(int fd, const std::string& tmp_path)>& body) {
  if (path.empty()) throw Error(Errc::invalid_argument, "output path is empty");
  struct stat st;
  if (!force && ::stat(path.c_str(), &st) == 0) exists_error(path);
  std::string tmp = path + ".tmp.XXXXXX";
  int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) io_error("creating a temporary file in " + parent_dir(path), errno);
  try {
    if (::fchmod(fd, 0644) != 0) io_error("setting permissions of " + tmp, errno);
    body(fd, tmp);
    if (::fsync(fd) != 0) io_error("flushing " + tmp + " to disk", errno);
    int rc = ::close(fd);
    fd = -1;
    if (rc != 0) io_error("closing " + tmp, errno);
    move_into_place(tmp, path, force);
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  fsync_dir(parent_dir(path));
}

}  // namespace detail

void write_file_atomically(const std::string& path, bool force,
                           const std::function<void(Sink&)>& body) {
  detail::create_atomically(path, force, [&](int fd, const std::string& tmp) {
    FdSink sink(fd, tmp);
    body(sink);
  });
}

}  // namespace kvzip::format
