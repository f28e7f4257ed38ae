// Runs the built `kvzip` binary (KVZIP_CLI_PATH, set by tests/CMakeLists.txt) as a child process
// for the CLI and fault-injection tests: arguments without a shell, stdout and stderr captured
// through files (a full pipe can never block the child), optional environment changes and a
// file-size limit, and a deadline after which the child is SIGKILLed and reported as hung.
#pragma once
#include <sys/types.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace kvzip::testing {

struct CliResult {
  int exit_code = -1;  // when the child exited
  int signal = 0;      // when a signal ended it
  bool hung = false;   // the deadline passed (the child was then SIGKILLed)
  std::string out, err;
  int shell_status() const { return signal ? 128 + signal : exit_code; }  // what $? shows
};

struct CliOptions {
  std::vector<std::pair<std::string, std::string>> env;  // set NAME=VALUE; an empty VALUE unsets
  double timeout_s = 120;
  // RLIMIT_FSIZE in bytes for the child, with SIGXFSZ ignored: writes beyond it fail with EFBIG,
  // a full-disk stand-in that needs no mount. Negative: no limit.
  long long file_size_limit = -1;
  // Called with the child's pid right after it started, while it runs (e.g. to signal it).
  std::function<void(pid_t)> while_running{};
};

// Options whose KVZIP_MODEL names no file: a command that would load the default model fails
// there, so a test can check that its arguments are refused before any model is needed.
inline CliOptions no_model_options() {
  CliOptions o;
  o.env = {{"KVZIP_MODEL", "/nonexistent/kvzip-test-model.gguf"}};
  return o;
}

std::string kvzip_binary();
CliResult run_kvzip(const std::vector<std::string>& args, const CliOptions& options = {});

// $KVZIP_MODEL when it names an existing file, else "" (the caller skips its [realmodel] test).
std::string real_model_or_empty();

// Polls `dir` every millisecond until a file whose name contains `fragment` appears (true) or
// `timeout_s` passes or process `pid` has ended (false).
bool wait_for_file(const std::string& dir, const std::string& fragment, pid_t pid,
                   double timeout_s);

}  // namespace kvzip::testing
