// The `kvzip` binary's messages for bad input ([cli]): every option-parser error, bad --threads,
// directories given as files, unknown --level/--method, and output paths checked before any
// input is read or any model loads — each with the `kvzip: error [code]: ...` form, its exit
// status and wording that says what to do. No model is needed: where a command would go on to
// load one, $KVZIP_MODEL names a missing file, so reaching the model would change the error.
// `eval --plot-csv` draws a plot from a CSV with no model at all.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "cli/cli_util.h"
#include "tests/format/fixtures.h"
#include "tests/support/run_cli.h"

using namespace kvzip::format;
using namespace kvzip::format::testing;
using namespace kvzip::testing;

namespace {

const CliOptions kNoModel = no_model_options();

// Runs kvzip; checks the exit status and that stderr is exactly one error line of `code` that
// contains every fragment.
CliResult expect_error(const std::vector<std::string>& args, int status, const std::string& code,
                       const std::vector<std::string>& fragments) {
  const CliResult r = run_kvzip(args, kNoModel);
  std::string cmd;
  for (const std::string& a : args) cmd += " " + a;
  INFO("kvzip" << cmd << "\nstderr: " << r.err);
  CHECK(r.signal == 0);
  CHECK(r.exit_code == status);
  CHECK_THAT(r.err, Catch::Matchers::StartsWith("kvzip: error [" + code + "]: "));
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  for (const std::string& f : fragments) CHECK_THAT(r.err, Catch::Matchers::Contains(f));
  return r;
}

std::string doc_in(const TempDir& dir) {
  write_bytes(dir.path("doc.txt"), {'H', 'e', 'l', 'l', 'o', '.', '\n'});
  return dir.path("doc.txt");
}

}  // namespace

TEST_CASE("option-parser errors take the kvzip error form and exit 2", "[cli]") {
  TempDir dir;
  const std::string doc = doc_in(dir);
  expect_error({"compress", doc, "--ratio", "abc"}, 2, "invalid_argument",
               {"--ratio abc is not a number", "see `kvzip compress --help`"});
  expect_error({"prune", "x.kvz", "--ratio", "1/3", "-o", "y.kvz"}, 2, "invalid_argument",
               {"--ratio 1/3 is not a number", "`kvzip prune --help`"});
  expect_error({"query", "x.kvz", "-n", "many", "q"}, 2, "invalid_argument",
               {"--max-tokens many is not a whole number (0 or more)"});
  expect_error({"compress", doc, "--nope"}, 2, "invalid_argument",
               {"--nope", "`kvzip compress --help`"});
  expect_error({"compress"}, 2, "invalid_argument", {"give a DOCUMENT or --manifest FILE"});
  expect_error({}, 2, "invalid_argument", {"A subcommand is required", "`kvzip --help`"});
  expect_error({"frobnicate"}, 2, "invalid_argument",
               {"unknown command 'frobnicate'; commands: ", "compress, "});
  const CliResult help = run_kvzip({"compress", "--help"});
  CHECK(help.exit_code == 0);
  CHECK_THAT(help.out, Catch::Matchers::Contains("--threads"));
  const CliResult version = run_kvzip({"--version"});
  CHECK(version.exit_code == 0);
  CHECK_THAT(version.out, Catch::Matchers::StartsWith("kvzip "));
}

TEST_CASE("--threads takes a whole number >= 0; more than the machine has is capped with a note",
          "[cli]") {
  TempDir dir;
  const std::string doc = doc_in(dir);
  for (const char* bad : {"-1", "abc", "1.5", "", "99999999999999999999"})
    expect_error(
        {"compress", doc, "--threads", bad}, 2, "invalid_argument",
        {std::string("--threads ") + bad + ": give a whole number of threads, at least 0"});
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  // The cap is noted, then the command goes on: here to the missing model.
  const CliResult r =
      run_kvzip({"compress", doc, "-o", dir.path("o.kvz"), "--threads", "10000"}, kNoModel);
  CHECK_THAT(r.err, Catch::Matchers::StartsWith(
                        "kvzip: note: --threads 10000 is more than the " + std::to_string(hw) +
                        " hardware threads of this machine; using " + std::to_string(hw) + "\n"));
  CHECK_THAT(r.err, Catch::Matchers::Contains("kvzip: error [not_found]: model file not found"));
  CHECK(r.exit_code == 3);
}

TEST_CASE("a directory given as a file says it is a directory", "[cli]") {
  TempDir dir;
  const std::string doc = doc_in(dir);
  std::filesystem::create_directory(dir.path("adir"));
  const std::string adir = dir.path("adir");
  expect_error({"compress", adir, "-o", dir.path("o.kvz")}, 2, "invalid_argument",
               {"document " + adir + " is a directory; give a UTF-8 text file"});
  expect_error(
      {"compress", doc, "-m", adir, "-o", dir.path("o.kvz")}, 2, "invalid_argument",
      {"model " + adir + " (from -m) is a directory without config.json; give a GGUF file"});
  CliOptions env_dir;
  env_dir.env = {{"KVZIP_MODEL", adir}};
  const CliResult r = run_kvzip({"compress", doc, "-o", dir.path("o.kvz")}, env_dir);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Matchers::Contains("(from $KVZIP_MODEL) is a directory"));
  expect_error({"inspect", adir}, 2, "invalid_argument",
               {adir + " is a directory, not a cache file"});
  if (hdf5_available())
    expect_error({"import", adir, "-o", dir.path("i.kvz")}, 2, "invalid_argument",
                 {adir + " is a directory, not an HDF5 file"});
  expect_error({"compress", doc, "--level", "head", "--head-scores", adir, "-o", dir.path("o.kvz")},
               2, "invalid_argument", {adir + " is a directory, not a head-scores file"});
  expect_error({"compress", doc, "-o", adir}, 2, "invalid_argument",
               {"output " + adir + " is a directory"});
}

TEST_CASE("--level and --method errors list every choice, head-level ones included", "[cli]") {
  TempDir dir;
  const std::string doc = doc_in(dir);
  expect_error({"compress", doc, "--level", "layer"}, 2, "invalid_argument",
               {"unknown --level 'layer'; known levels: global, per-head, per-layer, head"});
  expect_error({"compress", doc, "--method", "kvzipp"}, 2, "invalid_argument",
               {"unknown compression method 'kvzipp'", "snapkv", "kvzip-head"});
  expect_error({"eval", "--squad", dir.path("s.json"), "--methods", "kvzip,nope"}, 2,
               "invalid_argument", {"unknown compression method 'nope'", "kvzip-head"});
}

TEST_CASE("output paths are checked before any input is read or any model loads", "[cli]") {
  TempDir dir;
  const std::string doc = doc_in(dir);
  const std::string missing = dir.path("no/such");
  // The document, the model and the input caches here are all missing or absent: the error
  // must still be about the output, proving it came first.
  expect_error({"compress", doc, "-o", missing + "/o.kvz"}, 3, "not_found",
               {"cannot write " + missing + "/o.kvz: folder " + missing + " does not exist"});
  expect_error({"calibrate", doc, "-o", missing + "/o.kvh"}, 3, "not_found", {"folder " + missing});
  expect_error({"prune", dir.path("absent.kvz"), "--ratio", "0.1", "-o", missing + "/p.kvz"}, 3,
               "not_found", {"folder " + missing});
  expect_error({"export", dir.path("absent.kvz"), "--hdf5", missing + "/e.h5"}, 3, "not_found",
               {"folder " + missing});
  expect_error({"import", dir.path("absent.h5"), "-o", missing + "/i.kvz"}, 3, "not_found",
               {"folder " + missing});
  expect_error({"eval", "--squad", dir.path("absent.json"), "-o", missing + "/r.csv"}, 3,
               "not_found", {"eval: -o: cannot write", "folder " + missing});
  write_bytes(dir.path("o.kvz"), {1, 2, 3});
  expect_error({"compress", doc, "-o", dir.path("o.kvz")}, 2, "invalid_argument",
               {"output file " + dir.path("o.kvz") + " already exists; --force overwrites it"});
  expect_error({"prune", dir.path("absent.kvz"), "--ratio", "0.1", "-o", dir.path("o.kvz")}, 2,
               "invalid_argument", {"already exists"});
  CHECK(read_bytes(dir.path("o.kvz")) == std::vector<uint8_t>{1, 2, 3});
  // With -f the same command gets past the output check, to the model.
  expect_error({"compress", doc, "-o", dir.path("o.kvz"), "-f"}, 3, "not_found",
               {"model file not found"});
}

TEST_CASE("compress options are checked by the library before the model, flags named once",
          "[cli]") {
  TempDir dir;
  const std::string doc = doc_in(dir);
  const std::string out = dir.path("o.kvz");
  for (const char* bad : {"0", "1.5", "-0.2"})
    expect_error({"compress", doc, "--ratio", bad, "-o", out}, 2, "invalid_argument",
                 {"compress: ratio ", "is outside (0, 1]"});
  expect_error({"compress", doc, "--zstd", "20", "-o", out}, 2, "invalid_argument",
               {"compress: zstd level 20 is outside 0 (off) .. 19"});
  expect_error({"compress", doc, "--query-template", "Q: ", "-o", out}, 2, "invalid_argument",
               {"compress: the query template must contain {question}"});
  CHECK_FALSE(std::filesystem::exists(out));
}

TEST_CASE("library messages show the command line's flag where they name an option", "[cli]") {
  using kvzip::cli::with_flag_names;
  CHECK(with_flag_names("calibrate it, or use them anyway (option force_model)") ==
        "calibrate it, or use them anyway (--force-model)");
  CHECK(with_flag_names("load it anyway (option force); option force") ==
        "load it anyway (--force); --force");
  CHECK(with_flag_names("at most 16 (option compose.max_docs raises it)") ==
        "at most 16 (--max-compose raises it)");
  CHECK(with_flag_names("eval option compose 3: 2 paragraphs; option compose 3 needs 3") ==
        "eval --compose 3: 2 paragraphs; --compose 3 needs 3");
  CHECK(with_flag_names("needs option scorer, a .kvp file made by the scorer calibration") ==
        "needs --scorer, a .kvp file made by `kvzip calibrate --scorer`");
  CHECK(with_flag_names("option device cuda: use option device cpu") ==
        "--device cuda: use --device cpu");
  CHECK(with_flag_names("no option here") == "no option here");
}

TEST_CASE("eval --plot-csv draws the plot of a CSV without a model; bad input writes nothing",
          "[cli]") {
  TempDir dir;
  const std::string header =
      "method,ratio,achieved_ratio,contains,f1,kl,agreement,answer_f1,questions,compress_s,"
      "answer_s\n";
  const std::string csv = dir.path("r.csv");
  {
    std::ofstream f(csv);
    f << header << "full,1.0000,1.000000,41.6667,16.5599,0,100.0000,100.0000,96,0.8734,833.7573\n"
      << "kvzip,0.1000,0.100001,7.2917,3.8970,0.457892,1.0417,51.6141,96,380.6736,177.1009\n"
      << "kvzip,0.5000,0.500000,37.5000,14.5121,0.0159297,61.4583,87.3686,96,380.9497,217.8677\n";
  }
  const CliResult ok =
      run_kvzip({"eval", "--plot-csv", csv, "--plot", dir.path("p.svg")}, kNoModel);
  INFO("stderr: " << ok.err);
  REQUIRE(ok.exit_code == 0);
  std::ifstream in(dir.path("p.svg"));
  const std::string svg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK_THAT(svg, Catch::Matchers::StartsWith("<svg") && Catch::Matchers::Contains(">kvzip<"));
  CHECK(std::count(svg.begin(), svg.end(), '\n') > 10);
  expect_error({"eval", "--plot-csv", csv}, 2, "invalid_argument", {"--plot FILE"});
  expect_error({"eval", "--plot-csv", csv, "--plot", dir.path("p.png")}, 2, "invalid_argument",
               {"name the file .svg"});
  expect_error({"eval", "--plot-csv", dir.path("absent.csv"), "--plot", dir.path("q.svg")}, 3,
               "not_found", {"absent.csv"});
  {
    std::ofstream f(dir.path("bad.csv"));
    f << header << "kvzip,0.5,half,1,1,0,1,1,4,0,0\n";
  }
  expect_error({"eval", "--plot-csv", dir.path("bad.csv"), "--plot", dir.path("q.svg")}, 2,
               "invalid_argument", {"line 2: 'half' is not a number"});
  CHECK_FALSE(std::filesystem::exists(dir.path("q.svg")));
}
