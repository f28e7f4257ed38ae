// Compress jobs with the learned scorer (method kvzap): a server started with a scorer file writes
// a kvzap cache that records the file's name and checksum; without one the request is a 400
// no_scorer and nothing is written; a scorer of another model stops the server from starting.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "common/error.h"
#include "compress/learned_scorer.h"
#include "format/format.h"
#include "format/scorer_file.h"
#include "tests/serve/http_client.h"

using namespace kvzip;
using namespace kvzip::test;
using Catch::Matchers::Contains;

namespace {

// A scorer file for `model`'s shape and fingerprint with fixed pseudo-random coefficients (what
// they predict does not matter here, only that the server uses this file).
compress::LearnedScorerFile scorer_for(const model::Model& model, const std::string& name) {
  format::ScorerFile f;
  f.model = model.fingerprint();
  f.n_layers = model.config().n_layers;
  f.n_kv_heads = model.config().n_kv_heads;
  f.d_model = model.config().d_model;
  f.window = 64;
  f.train_windows = 1;
  f.r2.assign(f.n_layers, NAN);
  f.spearman.assign(f.n_layers, NAN);
  f.weights.resize(size_t(f.n_layers) * f.n_kv_heads * (f.d_model + 1));
  for (size_t i = 0; i < f.weights.size(); ++i) f.weights[i] = std::sin(0.37f * float(i));
  (void)format::encode_scorer_file(f);  // validates and sets the checksum
  compress::LearnedScorerFile s;
  s.source = compress::learned_scorer_source(f, name);
  s.file = std::make_shared<const format::ScorerFile>(std::move(f));
  return s;
}

nlohmann::json body_of(const std::string& response) {
  const size_t at = response.find("\r\n\r\n");
  REQUIRE(at != std::string::npos);
  return nlohmann::json::parse(response.substr(at + 4));
}

const nlohmann::json kJob = {{"id", "kv1"},
                             {"text", "The harbor froze in winter. The keeper counted ships."},
                             {"method", "kvzap"},
                             {"ratio", 0.5}};

}  // namespace

TEST_CASE("serve: a kvzap compress job without a scorer file is a 400 no_scorer", "[serve]") {
  ServedModel s("serve_kvzap_none");
  const std::string r = http(s.port, request("POST", "/v1/caches", kJob.dump()));
  CHECK(status_of(r) == 400);
  CHECK_THAT(r, Contains("no_scorer") && Contains("--scorer"));
  CHECK_FALSE(std::filesystem::exists(s.caches + "/kv1.kvz"));
}

TEST_CASE("serve: with a scorer file, a kvzap compress job writes a cache that names it",
          "[serve]") {
  serve::ServerOptions so;
  {
    TinyModelDir same("serve_kvzap_ref", 21, 4096);  // ServedModel's seed: the same weights
    so.scorer = scorer_for(*same.model, "/somewhere/tiny.kvp");
  }
  const std::string checksum = format::scorer_checksum_text(*so.scorer.file);
  ServedModel s("serve_kvzap", so);
  const std::string r = http(s.port, request("POST", "/v1/caches", kJob.dump()));
  REQUIRE(status_of(r) == 202);
  const std::string job = body_of(r)["id"].get<std::string>();
  std::string status;
  for (int i = 0; i < 600 && status != "succeeded" && status != "failed"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    status = body_of(http(s.port, request("GET", "/v1/jobs/" + job)))["status"].get<std::string>();
  }
  REQUIRE(status == "succeeded");
  const format::CacheReader c = format::CacheReader::open(s.caches + "/kv1.kvz");
  CHECK(c.header().method == "kvzap");
  const auto& p = c.header().params;
  auto has = [&](const std::string& k, const std::string& v) {
    return std::find(p.begin(), p.end(), std::make_pair(k, v)) != p.end();
  };
  CHECK(has("scorer", "tiny.kvp"));
  CHECK(has("scorer_xxh64", checksum));
  // A request that asks nothing keeps kvzip, the server's default.
  nlohmann::json plain = kJob;
  plain["id"] = "kv2";
  plain.erase("method");
  CHECK(status_of(http(s.port, request("POST", "/v1/caches", plain.dump()))) == 202);
}

TEST_CASE("serve: a scorer file of another model is refused at start", "[serve]") {
  serve::ServerOptions so;
  {
    TinyModelDir other("serve_kvzap_other", 22, 4096);
    so.scorer = scorer_for(*other.model, "other.kvp");
  }
  try {
    ServedModel s("serve_kvzap_mismatch", so);
    FAIL("the server started with another model's scorer");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::model_mismatch);
  }
}
