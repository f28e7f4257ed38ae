// Fault injection ([faults]): writes onto a full file system — a 64 KiB tmpfs when this process
// may mount one (root), and always RLIMIT_FSIZE with SIGXFSZ ignored (writes fail with EFBIG),
// which needs no privilege — through the library and through the real `kvzip` binary; SIGINT,
// SIGTERM and SIGKILL sent to a real `kvzip prune` (and, with $KVZIP_MODEL, `kvzip compress`)
// while its temporary output exists; and files whose checksums were recomputed over sections
// that cannot be decoded. Invariants checked: a clean `[io]` error, never a crash; no temporary
// or partial file afterwards; `inspect --verify` passes nothing that another command rejects.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>

#include "common/atomic_file.h"
#include "eval/eval.h"
#include "format/format.h"
#include "tests/format/fixtures.h"
#include "tests/format/patch.h"
#include "tests/support/run_cli.h"

using namespace kvzip;
using namespace kvzip::format;
using namespace kvzip::format::testing;
using namespace kvzip::testing;

namespace {

// A folder on a tmpfs of 64 KiB filled to the last byte, when mounting is allowed; else
// available() is false and the caller relies on the RLIMIT_FSIZE variant.
class FullTmpfs {
 public:
  FullTmpfs() {
    if (::geteuid() != 0) return;
    if (::mount("tmpfs", dir_.dir().c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=64k") != 0)
      return;
    mounted_ = true;
    std::ofstream fill(dir_.path("filler"), std::ios::binary);
    const std::string block(4096, 'f');
    while (fill.write(block.data(), block.size())) {}
    fill.close();
    std::ofstream last(dir_.path("filler2"), std::ios::binary);  // the tail smaller than a block
    while (last.put('f') && last.flush()) {}
  }
  ~FullTmpfs() {
    if (mounted_) ::umount2(dir_.dir().c_str(), MNT_DETACH);
  }
  bool available() const { return mounted_; }
  std::string path(const std::string& name) const { return dir_.path(name); }
  // Files other than the fillers.
  std::vector<std::string> written() const {
    std::vector<std::string> out;
    for (const std::string& n : dir_.list())
      if (n != "filler" && n != "filler2") out.push_back(n);
    return out;
  }

 private:
  TempDir dir_;
  bool mounted_ = false;
};

// Where a full-disk test writes: a full tmpfs (when this process may mount one), or a plain
// directory whose writes RLIMIT_FSIZE cuts off (the test sets the limit around each write).
struct FullDisk {
  const bool tmpfs;
  std::optional<FullTmpfs> fs;
  TempDir plain;

  explicit FullDisk(bool use_tmpfs) : tmpfs(use_tmpfs) {
    if (tmpfs) fs.emplace();
  }
  bool usable() const { return !tmpfs || fs->available(); }
  std::string path(const std::string& name) const {
    return tmpfs ? fs->path(name) : plain.path(name);
  }
  std::vector<std::string> left() const { return tmpfs ? fs->written() : plain.list(); }
  const char* how() const { return tmpfs ? " on a full tmpfs" : " past RLIMIT_FSIZE"; }
};

// RLIMIT_FSIZE for this process with SIGXFSZ ignored, restored on destruction. Nothing may log
// to a regular file meanwhile.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &old_);
    old_handler_ = ::signal(SIGXFSZ, SIG_IGN);
    rlimit lim = old_;
    lim.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &lim);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    ::signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit old_{};
  sighandler_t old_handler_ = SIG_DFL;
};

Error error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  FAIL("no kvzip::Error thrown");
  return Error(Errc::internal, "");
}

// A cache large enough that zstd level 19 keeps its writer busy for seconds.
CacheContents big_cache() {
  SyntheticSpec spec;
  spec.n_layers = 4;
  spec.n_kv_heads = 4;
  spec.head_dim = 64;
  spec.document = 3000;
  spec.keep = 0.95;
  return synthetic(spec);
}

}  // namespace

TEST_CASE("a full disk is a clean io error and leaves no file, for every writer", "[faults]") {
  const FullDisk disk(GENERATE(true, false));
  if (!disk.usable()) KVZIP_FORMAT_SKIP("cannot mount a tmpfs here (not root, or no permission)");
  const auto target = [&](const std::string& n) { return disk.path(n); };
  const std::string reason = disk.tmpfs ? "No space left on device" : "File too large";
  std::optional<FileSizeLimit> limit;
  const CacheContents c = synthetic({});
  eval::EvalReport report;
  report.rows.resize(400, eval::EvalRow{"kvzip", 0.5, 0.5, 0.1, 0.2, 0.3, 0.35, 0.4, 10, 1.0, 2.0});
  const std::vector<std::pair<std::string, std::function<void()>>> writers = {
      {".kvz", [&] { write_cache_file(c, target("c.kvz")); }},
      {".h5", [&] { export_hdf5(c, target("c.h5"), false); }},
      {"csv", [&] { eval::write_csv(target("r.csv"), report); }},
      {"bytes", [&] { write_file_atomically(target("b.bin"), false, std::string(200000, 'b')); }},
  };
  for (const auto& [name, write] : writers) {
    if (name == ".h5" && !hdf5_available()) continue;
    INFO(name << disk.how());
    Error e = [&] {
      if (!disk.tmpfs) limit.emplace(4096);
      Error got = error_of(write);
      limit.reset();
      return got;
    }();
    CHECK(e.code() == Errc::io);
    CHECK_THAT(e.what(),
               Catch::Matchers::Contains(reason) && Catch::Matchers::Contains("free space there"));
    CHECK(disk.left().empty());
  }
  // HDF5 is still usable afterwards (no half-closed file handle inside the library).
  if (hdf5_available()) {
    export_hdf5(c, disk.plain.path("ok.h5"), true);
    CHECK(same_contents(import_hdf5(disk.plain.path("ok.h5")), c));
  }
}

TEST_CASE("kvzip export and prune onto a full disk exit with [io], not a crash, and leave nothing",
          "[faults]") {
  const FullDisk disk(GENERATE(true, false));
  if (!disk.usable()) KVZIP_FORMAT_SKIP("cannot mount a tmpfs here (not root, or no permission)");
  TempDir in;
  write_cache_file(synthetic({}), in.path("c.kvz"));
  CliOptions o;
  if (!disk.tmpfs) o.file_size_limit = 4096;
  const std::string dir = disk.path("");
  std::vector<std::vector<std::string>> commands = {
      {"prune", in.path("c.kvz"), "--ratio", "0.2", "-o", dir + "p.kvz"}};
  if (hdf5_available()) commands.push_back({"export", in.path("c.kvz"), "--hdf5", dir + "e.h5"});
  for (const auto& args : commands) {
    INFO(args[0] << disk.how());
    const CliResult r = run_kvzip(args, o);
    INFO(r.err);
    CHECK(r.signal == 0);  // was SIGSEGV (139) in HDF5's cleanup at exit
    CHECK(r.exit_code == 4);
    CHECK_THAT(r.err, Catch::Matchers::StartsWith("kvzip: error [io]: writing " + dir));
    CHECK(disk.left().empty());
  }
}

TEST_CASE("SIGINT and SIGTERM during a real kvzip write remove its temporary file", "[faults]") {
  TempDir dir;
  write_cache_file(big_cache(), dir.path("big.kvz"));
  for (int sig : {SIGINT, SIGTERM}) {
    INFO("signal " << sig);
    bool seen = false;
    CliOptions o;
    o.while_running = [&](pid_t pid) {
      seen = wait_for_file(dir.dir(), "out.kvz.tmp.", pid, 60);  // the write has begun
      ::kill(pid, sig);
    };
    const CliResult r = run_kvzip(
        {"prune", dir.path("big.kvz"), "--ratio", "0.5", "--zstd", "19", "-o", dir.path("out.kvz")},
        o);
    INFO(r.err);
    REQUIRE(seen);
    CHECK(r.shell_status() == 128 + sig);  // 130, 143
    CHECK(r.signal == sig);
    CHECK(dir.list() == std::vector<std::string>{"big.kvz"});
  }
}

TEST_CASE("a SIGKILLed kvzip leaves a temporary named after it, which the next write removes",
          "[faults]") {
  TempDir dir;
  write_cache_file(big_cache(), dir.path("big.kvz"));
  pid_t killed = 0;
  CliOptions o;
  o.while_running = [&](pid_t pid) {
    killed = pid;
    if (wait_for_file(dir.dir(), "out.kvz.tmp.", pid, 60)) ::kill(pid, SIGKILL);
  };
  const CliResult r = run_kvzip(
      {"prune", dir.path("big.kvz"), "--ratio", "0.5", "--zstd", "19", "-o", dir.path("out.kvz")},
      o);
  REQUIRE(r.signal == SIGKILL);
  const std::string temp = "out.kvz.tmp." + std::to_string(killed) + ".";
  std::vector<std::string> names = dir.list();
  REQUIRE(names.size() == 2);
  CHECK(names[1].rfind(temp, 0) == 0);
  const CliResult again =
      run_kvzip({"prune", dir.path("big.kvz"), "--ratio", "0.5", "-o", dir.path("out.kvz")});
  CHECK(again.exit_code == 0);
  CHECK_THAT(again.err, Catch::Matchers::Contains("kvzip: note: removed " + dir.path(names[1])) &&
                            Catch::Matchers::Contains("process " + std::to_string(killed) +
                                                      ", which no longer runs"));
  CHECK(dir.list() == std::vector<std::string>{"big.kvz", "out.kvz"});
  CHECK_NOTHROW(CacheReader::open(dir.path("out.kvz"), {Verify::Full}));
}

TEST_CASE(
    "checksums forged over an undecodable zstd section: --verify, prune and export all refuse it",
    "[faults]") {
  TempDir dir;
  const CacheContents c = synthetic({});
  WriteOptions w;
  w.zstd_level = 3;
  Image img(to_bytes(c, w));
  const size_t s = 4 + 1;  // meta, index, positions, scores, then the K/V of layer 0, 1, ...
  std::memset(img.bytes.data() + img.section_start(s), 0, img.stored(s));
  img.reseal_section(s);
  img.reseal();
  write_bytes(dir.path("forged.kvz"), img.bytes);
  const CliResult plain = run_kvzip({"inspect", dir.path("forged.kvz")});
  CHECK(plain.exit_code == 0);  // metadata is intact; the text says K/V was not checked
  CHECK_THAT(plain.out,
             Catch::Matchers::Contains("K/V data not checked yet (checked by a full verify)"));
  std::vector<std::vector<std::string>> commands = {
      {"inspect", "--verify", dir.path("forged.kvz")},
      {"prune", dir.path("forged.kvz"), "--ratio", "0.2", "-o", dir.path("p.kvz")}};
  if (hdf5_available())
    commands.push_back({"export", dir.path("forged.kvz"), "--hdf5", dir.path("e.h5")});
  for (const auto& args : commands) {
    const CliResult r = run_kvzip(args);
    INFO(args[0] << ": " << r.err);
    CHECK(r.exit_code == 8);
    CHECK_THAT(r.err,
               Catch::Matchers::StartsWith("kvzip: error [corrupt]: " + dir.path("forged.kvz") +
                                           ": section 5 (kv layer 1)") &&
                   Catch::Matchers::Contains("not a zstd frame"));
  }
  CHECK(dir.list() == std::vector<std::string>{"forged.kvz"});
}

TEST_CASE("a NaN in a cache is reported as corrupt naming layer and head by every command",
          "[faults]") {
  TempDir dir;
  const CacheContents c = synthetic({});
  Image img(to_bytes(c));
  const size_t s = 4 + 2;  // K/V of layer 2
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const uint64_t v0 = uint64_t{c.layers[2].positions.size()} * c.header.head_dim * 4;  // V, row 0
  std::memcpy(img.bytes.data() + img.section_start(s) + v0, &nan, 4);
  img.reseal_section(s);
  img.reseal();
  write_bytes(dir.path("nan.kvz"), img.bytes);
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"inspect", "--verify", dir.path("nan.kvz")},
           {"prune", dir.path("nan.kvz"), "--ratio", "0.2", "-o", dir.path("p.kvz")}}) {
    const CliResult r = run_kvzip(args);
    INFO(args[0] << ": " << r.err);
    CHECK(r.exit_code == 8);
    CHECK_THAT(r.err, Catch::Matchers::StartsWith("kvzip: error [corrupt]: ") &&
                          Catch::Matchers::Contains(
                              "layer 2 head 0 row 0 (position 0) holds a NaN value"));
  }
}

TEST_CASE("SIGINT during a real kvzip compress write removes its temporary file",
          "[faults][realmodel]") {
  const std::string model = real_model_or_empty();
  if (model.empty())
    KVZIP_FORMAT_SKIP("set KVZIP_MODEL to SmolLM2-135M-Instruct.Q4_1.gguf to run this test");
  TempDir dir;
  std::string doc;
  for (int i = 0; i < 60; ++i)
    doc += "The Normans gave their name to Normandy, a region in France. ";
  write_bytes(dir.path("doc.txt"), std::vector<uint8_t>(doc.begin(), doc.end()));
  bool seen = false;
  CliOptions o;
  o.env = {{"KVZIP_MODEL", model}};
  o.timeout_s = 600;
  o.while_running = [&](pid_t pid) {
    seen = wait_for_file(dir.dir(), "doc.kvz.tmp.", pid, 500);
    ::kill(pid, SIGINT);
  };
  const CliResult r = run_kvzip(
      {"compress", dir.path("doc.txt"), "--method", "full", "--ratio", "1", "--zstd", "19", "-q"},
      o);
  INFO(r.err);
  REQUIRE(seen);
  CHECK(r.shell_status() == 130);
  CHECK(dir.list() == std::vector<std::string>{"doc.txt"});
}
