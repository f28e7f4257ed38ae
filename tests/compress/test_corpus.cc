// Corpus mode (compress/corpus.h): manifest lines that fail alone, the stable exact shard
// partition, outputs keyed so a rerun skips what is finished and redoes what changed or was
// damaged, on a tiny random model written as a GGUF (fast); and the real `kvzip compress
// --manifest` killed with SIGKILL mid-run and rerun ([realmodel]: documents slow enough to kill).
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "common/json.h"
#include "compress/corpus.h"
#include "format/format.h"
#include "tests/compress/support.h"
#include "tests/format/fixtures.h"
#include "tests/support/run_cli.h"
#include "tests/support/tiny_gguf.h"

using namespace kvzip;
using namespace kvzip::format::testing;
using namespace kvzip::testing;

namespace {

void write_text(const std::string& path, const std::string& s) {
  std::ofstream(path, std::ios::binary) << s;
}

// A tiny Llama GGUF with the test tokenizer (ChatML template) loaded as a Model.
std::unique_ptr<model::Model> tiny_model(const TempDir& dir) {
  test::TinyModelSpec spec;
  spec.config = test::tiny_gguf_llama_config();
  spec.config.max_context = 2048;
  const std::string path = dir.path("tiny.gguf");
  test::write_file(path, test::make_tiny_model(spec).bytes);
  return model::Model::load(path);
}

compress::CorpusOptions tiny_options(const std::string& out_dir) {
  compress::CorpusOptions o;
  o.out_dir = out_dir;
  o.file.compress.method = "snapkv";  // a scorer needing no reconstruction prompts
  o.file.compress.ratio = 0.5;
  o.file.threads = 1;
  return o;
}

std::string doc(int i) {
  std::string s = "Document " + std::to_string(i) + ":";
  for (int w = 0; w < 40 + 7 * i; ++w) s += " word" + std::to_string((w * 31 + i) % 97);
  return s;
}

std::string manifest_of(int n) {
  std::string m;
  for (int i = 0; i < n; ++i)
    m += json_dump(Json{{"id", "doc-" + std::to_string(i)}, {"text", doc(i)}}) + "\n";
  return m;
}

const compress::CorpusOutcome& outcome(const compress::CorpusSummary& s, const std::string& id) {
  const auto it = std::find_if(s.outcomes.begin(), s.outcomes.end(),
                               [&](const compress::CorpusOutcome& o) { return o.id == id; });
  REQUIRE(it != s.outcomes.end());
  return *it;
}

}  // namespace

TEST_CASE("manifest lines are parsed, and each bad line fails alone with its reason",
          "[compress]") {
  const std::string m =
      "{\"id\": \"a\", \"text\": \"hello\"}\n"
      "\n"
      "{\"id\": \"b\", \"path\": \"docs/b.txt\", \"method\": \"h2o\", \"ratio\": 0.25}\r\n"
      "{\"id\": \"c\", \"path\": \"/abs/c.txt\"}\n"
      "not json\n"
      "{\"id\": \"../x\", \"text\": \"t\"}\n"
      "{\"id\": \"d\", \"text\": \"t\", \"path\": \"p\"}\n"
      "{\"id\": \"e\"}\n"
      "{\"id\": \"a\", \"text\": \"again\"}\n"
      "{\"id\": \"f\", \"text\": \"t\", \"colour\": 1}\n"
      "{\"id\": \"g\", \"text\": \"t\", \"ratio\": \"0.3\"}\n"
      "[1, 2]\n";
  const auto e = compress::parse_manifest(m, "m.jsonl", "/base");
  REQUIRE(e.size() == 11);
  CHECK(e[0].id == "a");
  CHECK(e[0].text == "hello");
  CHECK(e[0].error.empty());
  CHECK(e[1].line == 3);
  CHECK(e[1].path == "/base/docs/b.txt");
  CHECK(e[1].method == std::optional<std::string>("h2o"));
  CHECK(e[1].ratio == std::optional<double>(0.25));
  CHECK(e[2].path == "/abs/c.txt");
  auto bad = [&](size_t i, const std::string& what) {
    INFO("entry " << i << ": " << e[i].error);
    CHECK_THAT(e[i].error, Catch::Matchers::Contains(what));
    CHECK_THAT(e[i].error, Catch::Matchers::StartsWith("m.jsonl:" + std::to_string(e[i].line)));
  };
  bad(3, "invalid JSON");
  CHECK(e[3].id == "line 5");
  bad(4, "not a cache id");
  bad(5, "exactly one of");
  bad(6, "exactly one of");
  bad(7, "appears on an earlier line");
  bad(8, "unknown field \"colour\"");
  bad(9, "\"ratio\" is a string");
  bad(10, "not a JSON object");
  CHECK(compress::valid_cache_id("normans.v2_final-1"));
  CHECK_FALSE(compress::valid_cache_id(""));
  CHECK_FALSE(compress::valid_cache_id(".."));
  CHECK_FALSE(compress::valid_cache_id(".hidden"));
  CHECK_FALSE(compress::valid_cache_id("a/b"));
  CHECK_FALSE(compress::valid_cache_id(std::string(129, 'a')));
}

TEST_CASE("shards partition the ids exactly and stably", "[compress]") {
  CHECK(compress::parse_shard("3/4").index == 3);
  CHECK(compress::parse_shard("0/1").count == 1);
  for (const char* bad : {"4/4", "1", "a/2", "-1/2", "1/0", "", "1/2/3"})
    CHECK_THROWS_AS(compress::parse_shard(bad), Error);
  std::vector<std::string> ids;
  for (int i = 0; i < 1000; ++i) ids.push_back("doc-" + std::to_string(i));
  for (uint32_t n : {1u, 2u, 4u, 7u}) {
    std::vector<int> per(n, 0);
    for (const auto& id : ids) {
      const uint32_t s = compress::shard_of(id, n);
      REQUIRE(s < n);
      ++per[s];
    }
    for (int c : per) CHECK(c > 1000 / int(n) / 2);  // every share gets a fair part
  }
  // The rule is xxh64(id, seed 0) mod N, pinned to values computed with libxxhash directly, so two
  // builds (or tasks on different machines) never disagree.
  CHECK(compress::shard_of("doc-0", 4) == 3);
  CHECK(compress::shard_of("doc-1", 4) == 2);
  CHECK(compress::shard_of("normans", 4) == 1);
  CHECK(compress::shard_of("doc-1", 7) == 4);
  CHECK(compress::shard_of("normans", 16) == 5);
  CHECK(compress::shard_of("d7", 16) == 10);
}

TEST_CASE(
    "a corpus run compresses, skips finished outputs on a rerun, and redoes changed or damaged "
    "ones",
    "[compress]") {
  TempDir dir;
  const auto model = tiny_model(dir);
  std::filesystem::create_directory(dir.path("out"));
  std::string m = manifest_of(4);
  m += "{\"id\": \"empty\", \"text\": \"   \"}\n";                       // fails: blank text
  m += "{\"id\": \"missing\", \"path\": \"nowhere.txt\"}\n";             // fails: no such file
  m += "{\"id\": \"badratio\", \"text\": \"x y z\", \"ratio\": 1.5}\n";  // fails: ratio
  const compress::CorpusOptions o = tiny_options(dir.path("out"));
  const auto entries = compress::parse_manifest(m, "m.jsonl", dir.dir());

  const compress::CorpusSummary first = compress::compress_corpus(*model, entries, o);
  CHECK(first.in_shard == 7);
  CHECK(first.done == 4);
  CHECK(first.failed == 3);
  CHECK(outcome(first, "empty").code == Errc::invalid_argument);
  CHECK(outcome(first, "missing").code == Errc::not_found);
  CHECK_THAT(outcome(first, "badratio").error, Catch::Matchers::Contains("ratio"));
  const auto names = TempDir::list_of(dir.path("out"));
  CHECK(names == std::vector<std::string>{"doc-0.kvz", "doc-1.kvz", "doc-2.kvz", "doc-3.kvz"});
  const format::CacheReader r0 = format::CacheReader::open(dir.path("out/doc-0.kvz"));
  CHECK(r0.header().method == "snapkv");
  CHECK(r0.header().document_text == doc(0));

  // Rerun: everything finished is skipped, the failures fail again.
  const compress::CorpusSummary again = compress::compress_corpus(*model, entries, o);
  CHECK(again.skipped == 4);
  CHECK(again.done == 0);
  CHECK(again.failed == 3);

  // A changed document, a damaged output and a changed option are redone; the rest skipped.
  std::string m2 = manifest_of(4);
  m2.replace(m2.find(doc(1)), doc(1).size(), doc(1) + " and more");
  {
    std::fstream f(dir.path("out/doc-2.kvz"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-8, std::ios::end);
    f.write("garbage!", 8);
  }
  const compress::CorpusSummary third =
      compress::compress_corpus(*model, compress::parse_manifest(m2, "m2.jsonl", dir.dir()), o);
  CHECK(outcome(third, "doc-0").status == compress::CorpusStatus::Skipped);
  CHECK(outcome(third, "doc-1").status == compress::CorpusStatus::Done);
  CHECK(outcome(third, "doc-2").status == compress::CorpusStatus::Done);
  CHECK(outcome(third, "doc-3").status == compress::CorpusStatus::Skipped);
  compress::CorpusOptions other = o;
  other.file.compress.ratio = 0.25;
  const compress::CorpusSummary fourth =
      compress::compress_corpus(*model, compress::parse_manifest(m2, "m2.jsonl", dir.dir()), other);
  CHECK(fourth.done == 4);
  CHECK(format::CacheReader::open(dir.path("out/doc-0.kvz")).header().requested_ratio == 0.25);

  // The summary is JSON with every document.
  const Json j = parse_json(json_dump(first.to_json()), "summary");
  CHECK(j["done"] == 4);
  CHECK(j["documents"].size() == 7);
  CHECK(j["shard"] == "0/1");
}

TEST_CASE("shards of a corpus together compress every document once", "[compress]") {
  TempDir dir;
  const auto model = tiny_model(dir);
  std::filesystem::create_directory(dir.path("out"));
  const auto entries = compress::parse_manifest(manifest_of(6), "m.jsonl", dir.dir());
  compress::CorpusOptions o = tiny_options(dir.path("out"));
  std::set<std::string> seen;
  uint64_t total = 0;
  for (uint32_t i = 0; i < 3; ++i) {
    o.shard = compress::Shard{i, 3};
    const compress::CorpusSummary s = compress::compress_corpus(*model, entries, o);
    CHECK(s.failed == 0);
    CHECK(s.skipped == 0);  // no shard touches another's documents
    total += s.done;
    for (const auto& r : s.outcomes) CHECK(seen.insert(r.id).second);
  }
  CHECK(total == 6);
  CHECK(TempDir::list_of(dir.path("out")).size() == 6);
  CHECK_THROWS_AS(compress::compress_corpus(*model, entries, tiny_options(dir.path("no-such-dir"))),
                  Error);
}

TEST_CASE("kvzip compress --manifest resumes after kill -9 and leaves only whole files",
          "[compress][realmodel]") {
  const std::string model = real_model_or_empty();
  if (model.empty())
    KVZIP_FORMAT_SKIP("set KVZIP_MODEL to SmolLM2-135M-Instruct.Q4_1.gguf to run this test");
  TempDir dir;
  std::filesystem::create_directory(dir.path("out"));
  std::string m;
  for (int i = 0; i < 6; ++i) {
    std::string text;
    for (int s = 0; s < 12; ++s)
      text += "In the year " + std::to_string(900 + 10 * i + s) + " the duke of region " +
              std::to_string(i) + " built castle number " + std::to_string(s) + " by the river. ";
    write_text(dir.path("d" + std::to_string(i) + ".txt"), text);
    m += json_dump(
             Json{{"id", "d" + std::to_string(i)}, {"path", "d" + std::to_string(i) + ".txt"}}) +
         "\n";
  }
  write_text(dir.path("m.jsonl"), m);
  const std::vector<std::string> args = {
      "compress", "--manifest", dir.path("m.jsonl"), "--out-dir", dir.path("out"),
      "-m",       model,        "--ratio",           "0.3",       "-t",
      "2",        "-q"};
  CliOptions kill_after_first;
  kill_after_first.timeout_s = 600;
  kill_after_first.while_running = [&](pid_t pid) {
    // Wait for the first finished output (a name ending in .kvz: its rename happened), then kill
    // during a later document.
    for (int i = 0; i < 300000; ++i) {
      const auto names = TempDir::list_of(dir.path("out"));
      if (std::any_of(names.begin(), names.end(), [](const std::string& n) {
            return n.size() > 4 && n.compare(n.size() - 4, 4, ".kvz") == 0;
          }))
        break;
      if (::kill(pid, 0) != 0) return;
      ::usleep(1000);
    }
    ::usleep(300 * 1000);
    ::kill(pid, SIGKILL);
  };
  const CliResult killed = run_kvzip(args, kill_after_first);
  INFO(killed.err);
  REQUIRE((killed.signal == SIGKILL || killed.exit_code == 0));  // a very fast run may finish first
  const auto after_kill = TempDir::list_of(dir.path("out"));
  const size_t whole = std::count_if(
      after_kill.begin(), after_kill.end(),
      [](const std::string& n) { return n.size() > 4 && n.substr(n.size() - 4) == ".kvz"; });
  CHECK(whole >= 1);
  if (killed.signal == SIGKILL) CHECK(whole < 6);

  CliOptions wait;
  wait.timeout_s = 600;
  const CliResult rerun = run_kvzip(args, wait);
  INFO(rerun.err);
  REQUIRE(rerun.exit_code == 0);
  const Json s = parse_json(rerun.out, "summary");
  CHECK(s["skipped"].get<uint64_t>() == whole);
  CHECK(s["done"].get<uint64_t>() == 6 - whole);
  CHECK(s["failed"] == 0);
  // Only the six caches remain: the killed run's temporary was removed by the rewrite of its path.
  CHECK(TempDir::list_of(dir.path("out")) ==
        std::vector<std::string>{"d0.kvz", "d1.kvz", "d2.kvz", "d3.kvz", "d4.kvz", "d5.kvz"});
  const CliResult inspect = run_kvzip({"inspect", "--verify", dir.path("out/d3.kvz")});
  CHECK(inspect.exit_code == 0);
}
