// common/atomic_file: the temporary's name pattern, commit and abandon, the checks before work
// (check_writable), removal of stale temporaries left by dead processes, and the signal cleanup,
// exercised in forked children that signal themselves mid-write.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "common/atomic_file.h"
#include "common/error.h"
#include "tests/format/fixtures.h"

using namespace kvzip;
using kvzip::format::testing::read_bytes;
using kvzip::format::testing::TempDir;
using kvzip::format::testing::write_bytes;

namespace {

Errc code_of(const std::function<void()>& f, std::string* message = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (message) *message = e.what();
    return e.code();
  }
  FAIL("no kvzip::Error thrown");
  return Errc::internal;
}

// A pid that certainly ran and no longer does: a child that exited and was reaped.
pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

// Forks; the child runs `body` and _exits (99 if it threw: Catch must never run in the child).
template <class F>
pid_t fork_child(F body) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  try {
    body();
  } catch (...) {
    ::_exit(99);
  }
  ::_exit(98);
}

}  // namespace

TEST_CASE("temporary names carry the writer's pid and are recognised", "[common]") {
  long pid = 0;
  CHECK(parse_temp_name("out.kvz.tmp.1234.0badc0de", "out.kvz", &pid));
  CHECK(pid == 1234);
  CHECK_FALSE(parse_temp_name("out.kvz.tmp.1234.0badc0d", "out.kvz", &pid));   // 7 hex digits
  CHECK_FALSE(parse_temp_name("out.kvz.tmp.12x4.0badc0de", "out.kvz", &pid));  // pid not a number
  CHECK_FALSE(parse_temp_name("out.kvz.tmp.1234.0BADC0DE", "out.kvz", &pid));  // upper case
  CHECK_FALSE(parse_temp_name("out.kvz.tmp.Xy12Ab", "out.kvz", &pid));       // the old mkstemp name
  CHECK_FALSE(parse_temp_name("out.kvzz.tmp.1.0badc0de", "out.kvz", &pid));  // another target
  CHECK_FALSE(parse_temp_name("out.kvz", "out.kvz", &pid));
}

TEST_CASE("an AtomicFile shows only its temporary until commit, and nothing if abandoned",
          "[common]") {
  TempDir dir;
  {
    AtomicFile f(dir.path("a.bin"), false);
    long pid = 0;
    const std::string name = std::filesystem::path(f.temp_path()).filename().string();
    CHECK(parse_temp_name(name, "a.bin", &pid));
    CHECK(pid == ::getpid());
    f.write("hello", 5);
    CHECK(dir.list() == std::vector<std::string>{name});
    f.commit();
  }
  CHECK(dir.list() == std::vector<std::string>{"a.bin"});
  CHECK(read_bytes(dir.path("a.bin")) == std::vector<uint8_t>{'h', 'e', 'l', 'l', 'o'});
  {
    AtomicFile g(dir.path("b.bin"), false);
    g.write("partial", 7);
  }  // destroyed without commit
  CHECK(dir.list() == std::vector<std::string>{"a.bin"});
}

TEST_CASE("check_writable refuses, with its own code, what a write would fail on", "[common]") {
  TempDir dir;
  std::string msg;
  CHECK(code_of([&] { check_writable("", false); }, &msg) == Errc::invalid_argument);
  CHECK_THAT(msg, Catch::Matchers::Contains("empty"));
  CHECK(code_of([&] { check_writable(dir.dir(), true); }, &msg) == Errc::invalid_argument);
  CHECK_THAT(msg, Catch::Matchers::Contains("is a directory"));
  CHECK(code_of([&] { check_writable(dir.path("no/such/x.kvz"), false); }, &msg) ==
        Errc::not_found);
  CHECK_THAT(msg, Catch::Matchers::Contains("folder " + dir.path("no/such") + " does not exist"));
  write_bytes(dir.path("file"), {1});
  CHECK(code_of([&] { check_writable(dir.path("file/x.kvz"), false); }, &msg) == Errc::not_found);
  CHECK(code_of([&] { check_writable(dir.path("file"), false); }, &msg) == Errc::invalid_argument);
  CHECK_THAT(msg, Catch::Matchers::Contains("already exists") &&
                      Catch::Matchers::Contains("option force"));
  check_writable(dir.path("file"), true);
  check_writable(dir.path("new"), false);
  if (::geteuid() != 0) {  // root writes into a 0555 folder anyway
    std::filesystem::create_directory(dir.path("ro"));
    std::filesystem::permissions(
        dir.path("ro"), std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
    CHECK(code_of([&] { check_writable(dir.path("ro/x"), false); }, &msg) == Errc::io);
    CHECK_THAT(msg, Catch::Matchers::Contains("no permission"));
    std::filesystem::permissions(dir.path("ro"), std::filesystem::perms::owner_all);
  }
  CHECK(dir.list() == std::vector<std::string>{"file"});  // checking created nothing
}

TEST_CASE("a write removes stale temporaries of its target whose process is gone", "[common]") {
  TempDir dir;
  const std::string dead = "t.kvz.tmp." + std::to_string(dead_pid()) + ".0badc0de";
  const std::string live = "t.kvz.tmp.1.0badc0de";  // pid 1 always runs: left alone
  const std::string other =
      "u.kvz.tmp." + std::to_string(dead_pid()) + ".0badc0de";  // another target
  for (const std::string& n : {dead, live, other}) write_bytes(dir.path(n), {7});
  write_file_atomically(dir.path("t.kvz"), false, "new");
  CHECK(dir.list() == std::vector<std::string>{"t.kvz", live, other});
}

TEST_CASE(
    "SIGINT, SIGTERM and SIGHUP mid-write remove the temporary and end the process with the signal",
    "[common]") {
  const int sig = GENERATE(SIGINT, SIGTERM, SIGHUP);
  TempDir dir;
  const pid_t pid = fork_child([&] {
    // Under nohup (or a shell that ignores the signal) the child inherits SIG_IGN, which
    // install_signal_cleanup rightly keeps (the next test): this test is about a caught signal.
    ::signal(sig, SIG_DFL);
    install_signal_cleanup();
    AtomicFile f(dir.path("out.bin"), false);
    std::string block(1 << 20, 'x');
    f.write(block.data(), block.size());
    ::kill(::getpid(), sig);  // the handler removes the temporary and re-raises: no return
  });
  int status = 0;
  ::waitpid(pid, &status, 0);
  INFO("signal " << sig);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == sig);  // shell status 128 + sig: 130, 143, 129
  CHECK(dir.list().empty());
}

TEST_CASE("a signal the caller ignores stays ignored after install_signal_cleanup", "[common]") {
  TempDir dir;
  const pid_t pid = fork_child([&] {
    ::signal(SIGINT, SIG_IGN);  // as under nohup or in a background job
    install_signal_cleanup();
    AtomicFile f(dir.path("out.bin"), false);
    ::kill(::getpid(), SIGINT);
    f.write("done", 4);
    f.commit();
    ::_exit(7);
  });
  int status = 0;
  ::waitpid(pid, &status, 0);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 7);
  CHECK(dir.list() == std::vector<std::string>{"out.bin"});
}

TEST_CASE("a SIGKILLed writer's temporary is recognisable and the next write removes it",
          "[common]") {
  TempDir dir;
  const pid_t pid = fork_child([&] {
    AtomicFile f(dir.path("out.bin"), false);
    f.write("half", 4);
    ::kill(::getpid(), SIGKILL);
  });
  int status = 0;
  ::waitpid(pid, &status, 0);
  REQUIRE(WIFSIGNALED(status));
  const std::vector<std::string> left = dir.list();
  REQUIRE(left.size() == 1);
  long writer = 0;
  CHECK(parse_temp_name(left[0], "out.bin", &writer));
  CHECK(writer == pid);
  write_file_atomically(dir.path("out.bin"), false, "whole");
  CHECK(dir.list() == std::vector<std::string>{"out.bin"});
}
