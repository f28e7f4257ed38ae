// run_kvzip and helpers (see run_cli.h).
#include "tests/support/run_cli.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace kvzip::testing {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

std::string kvzip_binary() { return KVZIP_CLI_PATH; }

std::string real_model_or_empty() {
  const char* env = std::getenv("KVZIP_MODEL");
  if (!env || !*env) return "";
  std::error_code ec;
  return std::filesystem::is_regular_file(env, ec) ? env : "";
}

CliResult run_kvzip(const std::vector<std::string>& args, const CliOptions& o) {
  char tmpl[] = "/tmp/kvzip-cli-XXXXXX";
  if (!::mkdtemp(tmpl)) throw std::runtime_error("run_kvzip: mkdtemp failed");
  const std::string dir = tmpl, out_path = dir + "/stdout", err_path = dir + "/stderr";
  std::vector<std::string> argv_s = {kvzip_binary()};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The environment is built here, not in the child: after fork only plain system calls are safe.
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e, name = kv.substr(0, kv.find('='));
    bool replaced = false;
    for (const auto& [k, v] : o.env) replaced |= k == name;
    if (!replaced) env_s.push_back(kv);
  }
  for (const auto& [k, v] : o.env)
    if (!v.empty()) env_s.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (std::string& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);

  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("run_kvzip: fork failed");
  if (pid == 0) {  // child: only plain system calls until exec
    const int in = ::open("/dev/null", O_RDONLY);
    const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (in < 0 || out < 0 || err < 0) ::_exit(127);
    ::dup2(in, 0), ::dup2(out, 1), ::dup2(err, 2);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGXFSZ}) ::signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (o.file_size_limit >= 0) {
      ::signal(SIGXFSZ, SIG_IGN);  // an ignored signal stays ignored across exec
      const rlimit lim{static_cast<rlim_t>(o.file_size_limit),
                       static_cast<rlim_t>(o.file_size_limit)};
      ::setrlimit(RLIMIT_FSIZE, &lim);
    }
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  if (o.while_running) o.while_running(pid);
  CliResult r;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(o.timeout_s);
  int status = 0;
  for (;;) {
    const pid_t got = ::waitpid(pid, &status, WNOHANG);
    if (got == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      r.hung = true;
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return r;
}

bool wait_for_file(const std::string& dir, const std::string& fragment, pid_t pid,
                   double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec))
      if (e.path().filename().string().find(fragment) != std::string::npos) return true;
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
        info.si_pid == pid)
      return false;  // it ended (left unreaped for run_kvzip)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

}  // namespace kvzip::testing
