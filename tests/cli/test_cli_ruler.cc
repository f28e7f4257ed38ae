// `kvzip eval --ruler` end to end: bad task names, settings, missing QA sources and unwritable
// outputs are refused before the model loads ([cli]); on the real model ([cli][realmodel], needs
// $KVZIP_MODEL, ~10 s) one short NIAH sample runs through the protocol and every output lists it.
// Method kvzap takes its scorer file (--scorer) in RULER as in SQuAD, shown on a tiny model file:
// a scorer calibrated for it runs, one of another model is refused before any sample.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/format/fixtures.h"
#include "tests/support/run_cli.h"
#include "tests/support/tiny_model_dir.h"

using namespace kvzip::format::testing;
using namespace kvzip::testing;

namespace {

CliResult refused(const std::vector<std::string>& args, int status, const std::string& fragment) {
  CliOptions o;
  o.env = {{"KVZIP_MODEL", "/nonexistent/kvzip-test-model.gguf"}};
  const CliResult r = run_kvzip(args, o);
  INFO("stderr: " << r.err);
  CHECK(r.exit_code == status);
  CHECK_THAT(r.err,
             Catch::Matchers::StartsWith("kvzip: error [") && Catch::Matchers::Contains(fragment));
  return r;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("eval --ruler refuses bad tasks, settings and sources before loading the model",
          "[cli]") {
  TempDir dir;
  refused({"eval", "--ruler", "niah_single_9"}, 2, "unknown task 'niah_single_9'");
  refused({"eval", "--ruler", "vt", "--setting", "both"}, 2,
          "--setting both is not agnostic or aware");
  refused({"eval", "--ruler", "vt", "--samples", "0"}, 2, "--samples must be at least 1");
  refused({"eval", "--ruler", "qa_1"}, 2, "qa_1 needs a SQuAD file (--squad FILE)");
  refused({"eval", "--ruler", "qa_2"}, 2, "qa_2 needs a HotpotQA file (--hotpotqa FILE)");
  refused({"eval", "--ruler", "vt", "--kvpress-csv", dir.path("no/such/k.csv")}, 3,
          "--kvpress-csv: cannot write");
  refused({"eval", "--ruler", "vt", "--haystack", dir.path("absent.txt")}, 3, "absent.txt");
  refused({"eval"}, 2, "--squad FILE) or RULER tasks (--ruler TASKS)");
  refused({"eval", "--ruler", "vt", "--methods", "kvzap"}, 2, "needs --scorer, a .kvp file");
  refused({"eval", "--ruler", "vt", "--methods", "kvzap", "--scorer", dir.path("none.kvp")}, 3,
          "none.kvp");
}

TEST_CASE("eval --ruler runs method kvzap with the model's scorer file", "[cli][eval]") {
  kvzip::test::TinyModelDir m("cli_ruler_kvzap", 31, 4096);
  kvzip::test::TinyModelDir other("cli_ruler_kvzap_other", 32, 4096);
  {
    std::ofstream text(m.path("calibration.txt"));
    for (int i = 0; i < 60; ++i) text << "The keeper counted " << i << " ships in the harbor.\n";
  }
  const std::vector<std::string> calibrate = {
      "calibrate", "--scorer", m.path("calibration.txt"), "--window", "64", "-q", "-t", "1", "-o"};
  std::vector<std::string> args = calibrate;
  args.insert(args.end(), {m.path("tiny.kvp"), "-m", m.path("m.gguf")});
  CliResult r = run_kvzip(args);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  args = calibrate;
  args.insert(args.end(), {m.path("other.kvp"), "-m", other.path("m.gguf")});
  REQUIRE(run_kvzip(args).exit_code == 0);

  auto eval = [&](const std::string& kvp) {
    return run_kvzip({"eval", "--ruler", "niah_single_1", "--len", "1024", "--methods", "kvzap",
                      "--ratios", "0.5", "-q", "-t", "1", "-m", m.path("m.gguf"), "-o",
                      m.path("r.csv"), "--scorer", kvp});
  };
  r = eval(m.path("tiny.kvp"));
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(slurp(m.path("r.csv")),
             Catch::Matchers::Contains("agnostic,1024,niah_single_1,kvzap,0.5000,"));
  std::filesystem::remove(m.path("r.csv"));
  r = eval(m.path("other.kvp"));
  CHECK(r.exit_code == 10);
  CHECK_THAT(r.err, Catch::Matchers::StartsWith("kvzip: error [model_mismatch]"));
  CHECK_FALSE(std::filesystem::exists(m.path("r.csv")));
}

TEST_CASE("eval --ruler runs a NIAH sample and writes the table, CSV, kvpress CSV and answers",
          "[cli][realmodel]") {
  const std::string path = real_model_or_empty();
  if (path.empty())
    KVZIP_FORMAT_SKIP("set KVZIP_MODEL to SmolLM2-135M-Instruct.Q4_1.gguf to run this test");
  TempDir dir;
  CliOptions o;
  o.env = {{"KVZIP_MODEL", path}};
  const CliResult r =
      run_kvzip({"eval", "--ruler", "niah_single_1", "--len", "768", "--methods", "streaming",
                 "--ratios", "0.5", "-q", "-o", dir.path("r.csv"), "--kvpress-csv",
                 dir.path("k.csv"), "--answers", dir.path("a.jsonl")},
                o);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out,
             Catch::Matchers::Contains("niah_single_1") && Catch::Matchers::Contains("streaming"));
  const std::string csv = slurp(dir.path("r.csv"));
  CHECK_THAT(csv, Catch::Matchers::StartsWith(
                      "setting,length,task,method,ratio,achieved_ratio,score,samples,score_se\n"
                      "agnostic,768,niah_single_1,full,1.0000,1.0000,"));
  CHECK_THAT(csv, Catch::Matchers::Contains("agnostic,768,niah_single_1,streaming,0.5000,"));
  const std::string kv = slurp(dir.path("k.csv"));
  CHECK_THAT(kv, Catch::Matchers::StartsWith(
                     "model,method,compression_ratio,task,score,setting,context_length,score_se,"
                     "samples\n"
                     "SmolLM2-135M-Instruct.Q4_1,no_press,0.000,niah_single_1,"));
  CHECK_THAT(kv, Catch::Matchers::Contains(",streaming,0.500,niah_single_1,"));
  const std::string answers = slurp(dir.path("a.jsonl"));
  CHECK(std::count(answers.begin(), answers.end(), '\n') ==
        2);  // the full cache and streaming at 0.5
  CHECK_THAT(answers, Catch::Matchers::Contains("\"document\":\"niah_single_1/768/0\""));
}
