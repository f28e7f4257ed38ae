// The one way kvzip creates an output file (.kvz, .kvh, .h5, CSV, PNG, JSONL). Bytes go to a
// temporary `<target>.tmp.<pid>.<8 hex digits>` in the target's folder, which is fsynced and
// renamed onto the target (never replacing an existing file unless force), then the folder is
// fsynced. Invariants: the target name only ever refers to a complete file; a temporary lives only
// while its AtomicFile does and is removed on every error path, on destruction and, once
// install_signal_cleanup ran, on SIGINT/SIGTERM/SIGHUP; one left by a SIGKILLed process carries
// that process's id, and the next write to the same target removes it once that process is gone.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace kvzip {

// Checks, before any long work, that `path` could be created now: not empty, not a directory, in
// an existing folder this process may write into, and not already there unless force.
// Errc::invalid_argument (empty, a directory, exists without force), Errc::not_found (no such
// folder), Errc::io (the folder is not writable: permissions, read-only file system).
void check_writable(const std::string& path, bool force);

class AtomicFile {
 public:
  // check_writable, then removes stale temporaries of `path` (noting each on stderr) and creates
  // a fresh one. Throws kvzip::Error; nothing is left behind when it does.
  AtomicFile(const std::string& path, bool force);
  ~AtomicFile();  // without commit(): the temporary is closed and removed, the target untouched
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Appends to the temporary. Errc::io naming the target and the system's reason (a full disk
  // reads "No space left on device"); the temporary is removed at once.
  void write(const void* data, size_t size);
  // fsync, close, rename onto the target, fsync the folder. Errc::invalid_argument when the target
  // appeared meanwhile and force is off; Errc::io otherwise. Removes the temporary on failure.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return tmp_; }

 private:
  void abandon() noexcept;  // close and remove the temporary, forget its registry slot
  std::string path_, tmp_;
  bool force_;
  int fd_ = -1;
  int slot_ = -1;  // signal-cleanup registry slot of tmp_, -1 when unregistered
};

// AtomicFile for a file whose bytes are all in memory.
void write_file_atomically(const std::string& path, bool force, std::string_view bytes);

// For SIGINT, SIGTERM and SIGHUP (each unless inherited as ignored, as under nohup): a handler
// that removes every live temporary, then lets the signal end the process as it would have
// (shell status 128 + signal: 130, 143, 129). Only the CLI calls it: library code does not take
// over process-wide signal dispositions behind its host's back. Idempotent.
void install_signal_cleanup();

// True when file name `name` (no folder) has the temporary pattern of target file name
// `target_name`; *pid receives the writer's process id.
bool parse_temp_name(std::string_view name, std::string_view target_name, long* pid);

}  // namespace kvzip
