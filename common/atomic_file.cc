// AtomicFile, check_writable and the signal-cleanup registry (see atomic_file.h). The registry is
// a fixed array of slots holding live temporary paths; the signal handler only reads it with
// lock-free atomics and calls unlink/raise/_exit, all async-signal-safe. A slot moves
// free -> filling -> live -> free (writer) or live -> claimed (handler; the process is ending).
#include "common/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/error.h"

namespace kvzip {
namespace {

// ---- registry of live temporary files ----------------------------------------------------

enum SlotState : int { kFree = 0, kFilling = 1, kLive = 2, kClaimed = 3 };
constexpr int kSlots = 64;           // kvzip writes one file at a time; room for embedders' threads
constexpr size_t kPathBytes = 4096;  // PATH_MAX
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs lock-free atomics");

struct Slot {
  std::atomic<int> state{kFree};
  char path[kPathBytes];
};
Slot g_slots[kSlots];

// -1 when every slot is taken or the path is too long: that write then goes without signal
// cleanup (the stale sweep of the next write still finds its leftover).
int register_temp(const std::string& path) {
  if (path.size() >= kPathBytes) return -1;
  for (int i = 0; i < kSlots; ++i) {
    int expected = kFree;
    if (!g_slots[i].state.compare_exchange_strong(expected, kFilling)) continue;
    std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
    g_slots[i].state.store(kLive, std::memory_order_release);
    return i;
  }
  return -1;
}

void unregister_temp(int slot) {
  if (slot < 0) return;
  int expected = kLive;  // a claimed slot stays claimed: the handler is using its path
  g_slots[slot].state.compare_exchange_strong(expected, kFree);
}

extern "C" void on_fatal_signal(int sig) {
  for (Slot& s : g_slots) {
    int expected = kLive;
    if (s.state.compare_exchange_strong(expected, kClaimed)) ::unlink(s.path);
  }
  // SA_RESETHAND restored the default action and SA_NODEFER left the signal unblocked, so this
  // ends the process the way the signal would have without us.
  ::raise(sig);
  ::_exit(128 + sig);
}

// ---- paths --------------------------------------------------------------------------------

std::string parent_dir(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string base_name(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

[[noreturn]] void io_error(const std::string& what, int err) {
  std::string hint;
  if (err == ENOSPC || err == EDQUOT || err == EFBIG)
    hint = "; free space there or write the file elsewhere";
  throw Error(Errc::io, what + ": " + std::strerror(err) + hint);
}

[[noreturn]] void exists_error(const std::string& path) {
  throw Error(Errc::invalid_argument,
              "output file " + path + " already exists; option force overwrites it");
}

uint32_t random_u32() {
  uint32_t r = 0;
  if (::getrandom(&r, sizeof r, GRND_NONBLOCK) == static_cast<ssize_t>(sizeof r)) return r;
  static std::atomic<uint32_t> counter{0};  // no entropy yet (early boot): time + counter
  return static_cast<uint32_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
         (counter.fetch_add(1) * 2654435761u);
}

std::string temp_name_for(const std::string& path) {
  char tail[48];
  std::snprintf(tail, sizeof tail, ".tmp.%ld.%08x", static_cast<long>(::getpid()), random_u32());
  return path + tail;
}

// Removes temporaries of `path` whose writer no longer runs. A live writer's (this process's
// or another kvzip's writing the same target now) is left alone; so is any whose pid cannot be
// judged (EPERM: a process of another user has it).
void remove_stale_temps(const std::string& path) {
  const std::string dir = parent_dir(path), target = base_name(path);
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  std::vector<std::pair<std::string, long>> found;
  while (const dirent* e = ::readdir(d)) {
    long pid = 0;
    if (parse_temp_name(e->d_name, target, &pid)) found.emplace_back(e->d_name, pid);
  }
  ::closedir(d);
  for (const auto& [name, pid] : found) {
    if (pid == static_cast<long>(::getpid())) continue;
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) == 0) continue;
    if (pid > 0 && errno != ESRCH) continue;
    const std::string full = dir + "/" + name;
    if (::unlink(full.c_str()) == 0)
      std::fprintf(stderr,
                   "kvzip: note: removed %s, a temporary file left by process %ld, which no "
                   "longer runs (it was killed while writing)\n",
                   full.c_str(), pid);
  }
}

// Without force the rename must not replace a file that appeared meanwhile: renameat2 with
// RENAME_NOREPLACE, or link + unlink where the file system lacks it.
void move_into_place(const std::string& tmp, const std::string& path, bool force) {
  if (force) {
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      io_error("renaming " + tmp + " to " + path, errno);
    return;
  }
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) == 0) return;
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
  if (fd < 0) return;  // the rename is done; a folder we cannot open cannot be synced either
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

bool parse_temp_name(std::string_view name, std::string_view target_name, long* pid) {
  const std::string_view mid = ".tmp.";
  if (name.size() <= target_name.size() + mid.size() ||
      name.substr(0, target_name.size()) != target_name)
    return false;
  name.remove_prefix(target_name.size());
  if (name.substr(0, mid.size()) != mid) return false;
  name.remove_prefix(mid.size());
  const auto dot = name.find('.');
  if (dot == 0 || dot == std::string_view::npos || dot > 10 || name.size() - dot - 1 != 8)
    return false;
  long p = 0;
  for (char c : name.substr(0, dot)) {
    if (c < '0' || c > '9') return false;
    p = p * 10 + (c - '0');
  }
  for (char c : name.substr(dot + 1))
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  if (pid) *pid = p;
  return true;
}

void check_writable(const std::string& path, bool force) {
  if (path.empty()) throw Error(Errc::invalid_argument, "output path is empty; give a file name");
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw Error(Errc::invalid_argument, "output " + path +
                                            " is a directory; give a file name (inside it, e.g. " +
                                            (path.back() == '/' ? path : path + "/") + "out)");
  const std::string dir = parent_dir(path);
  const int rc = ::stat(dir.c_str(), &st);
  if (rc != 0 && errno != ENOENT && errno != ENOTDIR)
    io_error("cannot write " + path + ": folder " + dir, errno);
  if (rc != 0 || !S_ISDIR(st.st_mode))
    throw Error(Errc::not_found, "cannot write " + path + ": folder " + dir +
                                     " does not exist; create it first or choose another");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    io_error("cannot write " + path + ": no permission to create files in folder " + dir, errno);
  if (!force && ::lstat(path.c_str(), &st) == 0) exists_error(path);
}

AtomicFile::AtomicFile(const std::string& path, bool force) : path_(path), force_(force) {
  check_writable(path, force);
  remove_stale_temps(path);
  for (int attempt = 0;; ++attempt) {
    tmp_ = temp_name_for(path);
    slot_ = register_temp(tmp_);  // before the file exists: no moment where a signal misses it
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ >= 0) return;
    const int err = errno;
    unregister_temp(slot_);
    slot_ = -1;
    if (err != EEXIST || attempt == 8)
      io_error("creating a temporary file in " + parent_dir(path), err);
  }
}

AtomicFile::~AtomicFile() { abandon(); }

void AtomicFile::abandon() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
  unregister_temp(slot_);
  slot_ = -1;
  tmp_.clear();
}

void AtomicFile::write(const void* data, size_t size) {
  if (fd_ < 0)
    throw Error(Errc::internal, "AtomicFile::write on " + path_ + " after commit or failure");
  auto* p = static_cast<const unsigned char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      abandon();
      io_error("writing " + path_ + " failed", err);
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  if (fd_ < 0)
    throw Error(Errc::internal, "AtomicFile::commit on " + path_ + " twice or after failure");
  try {
    if (::fsync(fd_) != 0) io_error("flushing " + path_ + " to disk failed", errno);
    const int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) io_error("closing " + path_ + " failed", errno);
    move_into_place(tmp_, path_, force_);
  } catch (...) {
    abandon();
    throw;
  }
  unregister_temp(slot_);  // renamed: nothing of ours is left under the temporary name
  slot_ = -1;
  tmp_.clear();
  fsync_dir(parent_dir(path_));
}

void write_file_atomically(const std::string& path, bool force, std::string_view bytes) {
  AtomicFile f(path, force);
  f.write(bytes.data(), bytes.size());
  f.commit();
}

void install_signal_cleanup() {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) != 0) continue;
    if (old.sa_handler == SIG_IGN) continue;  // nohup, background job: the caller wants it ignored
    struct sigaction sa {};
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND | SA_NODEFER;
    ::sigaction(sig, &sa, nullptr);
  }
}

}  // namespace kvzip
