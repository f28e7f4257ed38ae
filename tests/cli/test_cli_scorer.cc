// `kvzip calibrate --scorer` and `compress --scorer` ([cli]): the messages for bad use without a
// model (kvzap without a file, a missing or damaged file, a folder without texts, calibration
// options without --scorer), and ([realmodel]) the whole path on the real model: train on a
// licence text, inspect the .kvp, compress another licence text with it, find the scorer's name
// and checksum in the cache's inspect output, and answer a question from that cache.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "tests/format/fixtures.h"
#include "tests/support/run_cli.h"
#include "tests/support/skip.h"

using namespace kvzip::format::testing;
using namespace kvzip::testing;

namespace {

const CliOptions kNoModel = no_model_options();

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

void expect(const CliResult& r, int status, const std::string& code, const std::string& fragment) {
  INFO("stderr: " << r.err);
  CHECK(r.exit_code == status);
  CHECK_THAT(r.err, Catch::Matchers::StartsWith("kvzip: error [" + code + "]: "));
  CHECK_THAT(r.err, Catch::Matchers::Contains(fragment));
}

}  // namespace

TEST_CASE("kvzap needs a scorer file, and bad scorer files are refused before the model loads",
          "[cli]") {
  TempDir dir;
  const std::string doc = dir.path("doc.txt");
  write_text(doc, "Hello.\n");
  expect(run_kvzip({"compress", doc, "--method", "kvzap", "-o", dir.path("a.kvz")}, kNoModel), 2,
         "invalid_argument", "needs --scorer");
  expect(run_kvzip({"compress", doc, "--scorer", dir.path("none.kvp"), "-o", dir.path("a.kvz")},
                   kNoModel),
         3, "not_found", "calibrate --scorer");
  expect(
      run_kvzip({"compress", doc, "--scorer", doc, "--method", "snapkv", "-o", dir.path("a.kvz")},
                kNoModel),
      2, "invalid_argument", "cannot use it");
  write_text(dir.path("bad.kvp"), "\x89KVP\r\n\x1a\n\x01");
  expect(run_kvzip({"compress", doc, "--scorer", dir.path("bad.kvp"), "-o", dir.path("a.kvz")},
                   kNoModel),
         5, "truncated", "bad.kvp");
  expect(run_kvzip({"eval", "--squad", doc, "--methods", "kvzap"}, kNoModel), 2, "invalid_argument",
         "needs --scorer, a .kvp file");
  expect(run_kvzip({"eval", "--squad", doc, "--methods", "kvzap-stream"}, kNoModel), 2,
         "invalid_argument", "needs --scorer, a .kvp file");
  expect(run_kvzip({"compress", doc, "--stream", "-o", dir.path("a.kvz")}, kNoModel), 2,
         "invalid_argument", "method kvzap");
  CHECK_FALSE(std::filesystem::exists(dir.path("a.kvz")));
  expect(run_kvzip(
             {"serve", "--caches", dir.path(""), "--port", "0", "--scorer", dir.path("none.kvp")},
             kNoModel),
         3, "not_found", "none.kvp");
  std::filesystem::create_directory(dir.path("empty"));
  expect(run_kvzip({"calibrate", "--scorer", dir.path("empty"), "-o", dir.path("m.kvp")}, kNoModel),
         2, "invalid_argument", "holds no files");
  expect(run_kvzip({"calibrate", doc, "--target", "kvzip", "-o", dir.path("m.kvh")}, kNoModel), 2,
         "invalid_argument", "--scorer only");
  expect(run_kvzip({"calibrate", "--scorer", doc, "--target", "logits", "-o", dir.path("m.kvp")},
                   kNoModel),
         2, "invalid_argument", "expected kvzip or kvzip+");
  expect(run_kvzip({"calibrate", doc, doc, "-o", dir.path("m.kvh")}, kNoModel), 2,
         "invalid_argument", "several texts train --scorer only");
}

TEST_CASE("calibrate --scorer, then compress --scorer and query on the real model",
          "[cli][realmodel]") {
  KVZIP_REAL_MODEL_PATH_OR_SKIP(model);
  // Debian's licence texts: a calibration text and a document that examples/ does not hold.
  const std::string licence = "/usr/share/common-licenses/Apache-2.0";
  const std::string text_doc = "/usr/share/common-licenses/BSD";
  if (!std::filesystem::exists(licence) || !std::filesystem::exists(text_doc))
    return kvzip::test::skip("KVZIP_REQUIRE_MODEL", "no /usr/share/common-licenses texts");
  TempDir dir;
  const std::string kvp = dir.path("smol.kvp");
  CliResult r = run_kvzip({"calibrate", "--scorer", licence, "-o", kvp, "--window", "256",
                           "--heldout-every", "3", "-t", "2"},
                          CliOptions{{}, 900});
  INFO("calibrate stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Matchers::Contains("held out"));
  CHECK_THAT(r.err, Catch::Matchers::Contains("R2 kvzip+"));

  r = run_kvzip({"inspect", kvp, "--json"});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Matchers::Contains("\"kind\":\"scorer\""));
  CHECK_THAT(r.out, Catch::Matchers::Contains("\"target\":\"kvzip+\""));
  const size_t at = r.out.find("\"checksum\":\"");
  REQUIRE(at != std::string::npos);
  const std::string checksum = r.out.substr(at + 12, 18);

  const std::string kvz = dir.path("doc.kvz");
  r = run_kvzip({"compress", text_doc, "--scorer", kvp, "--ratio", "0.3", "-o", kvz, "-t", "2"},
                CliOptions{{}, 600});
  INFO("compress stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Matchers::Contains("method kvzap"));
  r = run_kvzip({"inspect", kvz});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Matchers::Contains("smol.kvp"));
  CHECK_THAT(r.out, Catch::Matchers::Contains(checksum));
  r = run_kvzip({"query", kvz, "What is this text about?", "-n", "8", "-t", "2"},
                CliOptions{{}, 300});
  INFO("query stderr: " << r.err);
  CHECK(r.exit_code == 0);
  CHECK(!r.out.empty());

  // Evicting while reading: the same ratio, a file that records it, a cache that answers.
  const std::string streamed = dir.path("streamed.kvz");
  r = run_kvzip({"compress", text_doc, "--scorer", kvp, "--ratio", "0.3", "--stream", "-o",
                 streamed, "-t", "2"},
                CliOptions{{}, 600});
  INFO("compress --stream stderr: " << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Matchers::Contains("ratio 0.300 kept"));
  CHECK_THAT(r.err, Catch::Matchers::Contains("streamed: at most"));
  r = run_kvzip({"inspect", streamed});
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Matchers::Contains("stream=on"));
  r = run_kvzip({"query", streamed, "What is this text about?", "-n", "8", "-t", "2"},
                CliOptions{{}, 300});
  CHECK(r.exit_code == 0);
  CHECK(!r.out.empty());
}
