// Composition from the command line, its options checked before any work:
//  - `query` takes --blend-rule (an unknown rule: exit 2 naming the rules; each rule answers),
//  - `query` takes --max-compose (more caches than it: exit 2 naming the option; raised: answers)
//    and --cache FILE, repeatable, which names one file as written ('+' included);
//  - `eval --compose` runs on a sliding-window model (the tiny Gemma 3 fixture), needs --squad,
//    and says how many paragraphs the file has;
//  - `eval --ruler --len` refuses a zero length before the model loads;
//  - `eval --retrieve` refuses what it cannot run (with --compose, K out of range, no --squad,
//    several ratios) writing nothing, and runs on a tiny model and on a sliding-window model.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "tests/format/fixtures.h"
#include "tests/serve/support.h"
#include "tests/support/hf_fixture.h"
#include "tests/support/run_cli.h"
#include "tests/support/tiny_model_dir.h"

using namespace kvzip;
using namespace kvzip::testing;
using Catch::Matchers::Contains;

namespace {

const char* kOneParagraph = R"({"data": [{"title": "Pets", "paragraphs": [
  {"context": "The cat sat on the mat.",
   "qas": [{"question": "Where did the cat sit?", "id": "a", "answers": [{"text": "on the mat"}]}]}]}]})";

const char* kTwoParagraphs = R"({"data": [{"title": "Pets", "paragraphs": [
  {"context": "The cat sat on the mat.",
   "qas": [{"question": "Where did the cat sit?", "id": "a", "answers": [{"text": "on the mat"}]}]},
  {"context": "A dog ate a bone at noon.",
   "qas": [{"question": "When?", "id": "b", "answers": [{"text": "noon"}]}]}]}]})";

void write(const std::string& path, const char* text) {
  std::ofstream f(path);
  f << text;
}

CliResult run_logged(const std::vector<std::string>& args, const CliOptions& o = {}) {
  const CliResult r = run_kvzip(args, o);
  UNSCOPED_INFO("stdout: " << r.out << "\nstderr: " << r.err);
  return r;
}

struct Caches : test::TinyModelDir {
  Caches() : TinyModelDir("cli_compose", 31, 4096) {
    test::compress_document(*model, "The lighthouse keeper counted ships.", path("a.kvz"));
    test::compress_document(*model, "Mira planted seven apple trees.", path("x+y.kvz"));
  }
};

}  // namespace

TEST_CASE("query: --max-compose bounds a composition and is named when passed", "[cli][compose]") {
  Caches c;
  std::string many = c.path("a.kvz");
  for (int i = 1; i < 18; ++i) many += "+" + c.path("a.kvz");  // 18 caches
  const CliResult over =
      run_logged({"query", "-m", c.path("m.gguf"), many, "Who?", "-n", "2", "-t", "1"});
  CHECK(over.exit_code == 2);
  CHECK_THAT(over.err, Contains("at most 16") && Contains("--max-compose"));
  const CliResult raised = run_logged({"query", "-m", c.path("m.gguf"), many, "Who?", "-n", "2",
                                       "-t", "1", "--blend", "0", "--max-compose", "18", "--json"});
  CHECK(raised.exit_code == 0);
  CHECK_THAT(raised.out, Contains("\"answer\""));
}

TEST_CASE("query: --blend-rule picks a rule; an unknown one names the rules", "[cli][compose]") {
  Caches c;
  const std::string two = c.path("a.kvz") + "+" + c.path("a.kvz");
  for (const char* rule : {"deviation", "sink", "sink-deviation"}) {
    const CliResult r = run_logged({"query", "-m", c.path("m.gguf"), two, "Who?", "-n", "2", "-t",
                                    "1", "--blend", "0.5", "--blend-rule", rule, "--json"});
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.out, Contains("\"answer\""));
  }
  const CliResult bad = run_logged({"query", "-m", c.path("m.gguf"), two, "Who?", "-n", "2", "-t",
                                    "1", "--blend-rule", "first"});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Contains("unknown blend rule \"first\"") && Contains("sink-deviation"));
}

TEST_CASE("query: --cache names a file whose name holds '+', repeated to compose",
          "[cli][compose]") {
  Caches c;
  const CliResult r =
      run_logged({"query", "-m", c.path("m.gguf"), "--cache", c.path("x+y.kvz"), "--cache",
                  c.path("a.kvz"), "Who counted ships?", "-n", "2", "-t", "1", "--json"});
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("\"question\":\"Who counted ships?\"") && Contains("x+y.kvz\",\"") &&
                        Contains("a.kvz\"]"));
  // Joined by '+', the name is split at its own '+' and the first piece does not exist.
  const CliResult split =
      run_logged({"query", "-m", c.path("m.gguf"), c.path("x+y.kvz") + "+" + c.path("a.kvz"),
                  "Who?", "-n", "2"});
  CHECK(split.exit_code == 3);
}

// The tiny Gemma 3 fixture with a context long enough for a question's default room (512).
struct LongGemma3 : test::HfCopy {
  LongGemma3() : HfCopy("gemma3") {
    edit_json("config.json", [](nlohmann::json& j) { j["max_position_embeddings"] = 2048; });
  }
};

TEST_CASE("eval --compose runs on a sliding-window model", "[cli][compose][eval]") {
  format::testing::TempDir dir;
  write(dir.path("two.json"), kTwoParagraphs);
  const LongGemma3 gemma;
  const CliResult r = run_logged({"eval", "-m", gemma.dir(), "--squad", dir.path("two.json"),
                                  "--compose", "2", "--blends", "0,1", "-q", "-t", "1"});
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("joint"));  // the table, with the joint prefill's row
}

TEST_CASE("eval --compose and --ruler --len are checked before any work", "[cli][compose][eval]") {
  format::testing::TempDir dir;
  write(dir.path("one.json"), kOneParagraph);
  CliOptions o;
  o.env = {{"KVZIP_MODEL", "/nonexistent/kvzip-test-model.gguf"}};  // refused before it is loaded
  const CliResult no_squad =
      run_logged({"eval", "--ruler", "niah_single_1", "--len", "300", "--compose", "2"}, o);
  CHECK(no_squad.exit_code == 2);
  CHECK_THAT(no_squad.err, Contains("--compose needs --squad"));
  const CliResult one = run_logged({"eval", "--squad", dir.path("one.json"), "--compose", "2"}, o);
  CHECK(one.exit_code == 2);
  CHECK_THAT(one.err, Contains("has 1 paragraph with questions; --compose 2 needs at least 2"));
  const CliResult zero = run_logged(
      {"eval", "--ruler", "niah_single_1", "--len", "300,0", "-o", dir.path("r.csv")}, o);
  CHECK(zero.exit_code == 2);
  CHECK_THAT(zero.err, Contains("--len 0"));
  CHECK(!std::filesystem::exists(dir.path("r.csv")));
}

TEST_CASE("eval --retrieve is checked before any work and writes nothing when refused",
          "[cli][eval][library]") {
  format::testing::TempDir dir;
  write(dir.path("two.json"), kTwoParagraphs);
  const std::string two = dir.path("two.json"), csv = dir.path("r.csv");
  CliOptions o;
  o.env = {{"KVZIP_MODEL", "/nonexistent/kvzip-test-model.gguf"}};  // refused before it is loaded
  struct Case {
    std::vector<std::string> args;
    const char* message;
  };
  const std::vector<Case> cases = {
      {{"--squad", two, "--retrieve", "2", "--compose", "2"}, "--retrieve and --compose"},
      {{"--squad", two, "--retrieve", "0"}, "retrieve at least 1"},
      {{"--squad", two, "--retrieve", "3"},
       "has 2 paragraphs with questions; --retrieve 3 needs at least 3"},
      {{"--retrieve", "2"}, "--retrieve needs --squad"},
      {{"--squad", two, "--retrieve", "2", "--ratios", "0.5,0.3"}, "give one ratio"},
      {{"--squad", two, "--retrieve", "2", "--blends", "2"}, "outside [0, 1]"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"eval", "-o", csv};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const CliResult r = run_logged(args, o);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains(c.message));
    CHECK(r.out.empty());
    CHECK(!std::filesystem::exists(csv));
  }
}

TEST_CASE("eval --retrieve runs on a sliding-window model", "[cli][eval][library]") {
  format::testing::TempDir dir;
  write(dir.path("two.json"), kTwoParagraphs);
  const LongGemma3 gemma;
  const CliResult r = run_logged({"eval", "-m", gemma.dir(), "--squad", dir.path("two.json"),
                                  "--retrieve", "2", "-q", "-t", "1", "-o", dir.path("r.csv")});
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(std::filesystem::exists(dir.path("r.csv")));
}

TEST_CASE("eval --retrieve on a tiny model prints the table and writes the CSV",
          "[cli][eval][library]") {
  test::TinyModelDir m("cli_retrieve", 31, 4096);
  write(m.path("two.json"), kTwoParagraphs);
  const CliResult r =
      run_logged({"eval", "-m", m.path("m.gguf"), "--squad", m.path("two.json"), "--retrieve", "2",
                  "--blends", "0", "-n", "2", "-q", "-t", "1", "-o", m.path("r.csv")});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("recall@2 50.0%"));  // no paragraph holds a word of "When?"
  CHECK_THAT(r.out, Contains("oracle"));
  std::ifstream f(m.path("r.csv"));
  std::string header;
  std::getline(f, header);
  CHECK_THAT(header, Contains("setting,method,ratio,k,blend,recall,"));
}
