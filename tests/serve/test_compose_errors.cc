// Composed and single-cache requests in serve/ when the client or a file is at fault, over HTTP on
// loopback: every such request is a 4xx naming the problem, never a 500.
//  - caches of a model with sliding-window layers (the tiny Gemma 3 fixture) compose as they do
//    for `kvzip query` (200), also a cache composed with itself;
//  - a truncated or checksum-damaged .kvz in the folder is a 422 naming the cache, alone or
//    composed, and counted in /metrics (kvzip_cache_errors_total);
//  - a cache larger than the whole --max-loaded-bytes budget is a 422 cache_too_large, with no
//    Retry-After (retrying never helps);
//  - --max-compose above the loader's default composes that many (no 500 from the composition);
//  - a body sent to a path no route has is a 404, not a 413;
// and in the engine: a single-cache request completes while a composition is still composing
// (the composition is held on the composing thread until the single-cache answer is done).
#include <catch2/catch.hpp>

#include <httplib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include <unistd.h>

#include "common/json.h"
#include "compress/pipeline.h"
#include "serve/cache_store.h"
#include "serve/engine.h"
#include "serve/server.h"
#include "tests/serve/support.h"
#include "tests/support/hf_fixture.h"
#include "tests/support/tiny_model_dir.h"

using namespace kvzip;
using namespace kvzip::serve;

namespace {

const char* kDocs[] = {
    "The lighthouse keeper counted ships every night. In winter the harbor froze.",
    "Mira planted seven apple trees behind the school. The third tree never bloomed."};

const char* kQuestion = "Who counted ships?";

// A server on loopback over `caches`, stopped when the object goes.
struct Served {
  Server server;
  int port;
  std::thread t;
  Served(const model::Model& m, ServerOptions so)
      : server(m, [&] {
          so.port = 0;
          so.access_log = false;
          if (so.engine.threads == 0) so.engine = test::engine_options(2, 4, 64);
          return so;
        }()) {
    port = server.bind();
    t = std::thread([this] { server.listen(); });
  }
  ~Served() {
    server.stop(std::chrono::milliseconds(1000));
    t.join();
  }
  httplib::Result ask(const std::string& model) {
    httplib::Client cli("127.0.0.1", port);
    cli.set_read_timeout(60, 0);
    const Json body = {{"model", model},
                       {"max_tokens", 3},
                       {"temperature", 0},
                       {"messages", Json::array({{{"role", "user"}, {"content", kQuestion}}})}};
    return cli.Post("/v1/chat/completions", body.dump(), "application/json");
  }
};

std::string code_of(const httplib::Result& r) {
  return Json::parse(r->body).at("error").at("code").get<std::string>();
}

struct LlamaCaches : test::TinyModelDir {
  std::string caches;
  LlamaCaches() : TinyModelDir("serve_compose_errors", 21, 4096) {
    caches = path("caches");
    std::filesystem::create_directories(caches);
    test::compress_document(*model, kDocs[0], caches + "/a.kvz");
    test::compress_document(*model, kDocs[1], caches + "/b.kvz");
  }
};

}  // namespace

TEST_CASE("serve: caches of a sliding-window model compose", "[serve][compose]") {
  const auto m = model::Model::load(test::hf_golden("gemma3"));
  REQUIRE(m->config().hybrid());
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("kvzip_serve_hybrid_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  struct Cleanup {
    std::filesystem::path p;
    ~Cleanup() { std::filesystem::remove_all(p); }
  } cleanup{dir};
  for (int i = 0; i < 2; ++i) {  // the fixture's context is 512: a small answer room
    compress::CompressFileOptions o;
    o.compress.method = "kvzip";
    o.compress.ratio = 0.5;
    o.compress.scorer = compress::make_scorer_options(m->chat(), 512, 0);
    o.compress.prefill.answer_room = 64;
    o.threads = 2;
    compress::compress_to_file(*m, kDocs[i], o, (dir / (i ? "gb.kvz" : "ga.kvz")).string());
  }
  ServerOptions so;
  so.caches_dir = dir.string();
  Served s(*m, so);
  for (const char* id : {"ga+gb", "gb+gb", "ga"}) {
    auto r = s.ask(id);
    REQUIRE(r);
    INFO(id << ": " << r->body);
    REQUIRE(r->status == 200);
    const Json j = Json::parse(r->body);
    CHECK(j.at("usage").at("completion_tokens").get<int>() > 0);
  }
}

TEST_CASE("serve: a damaged .kvz is a 422 naming the cache, counted in /metrics",
          "[serve][compose]") {
  LlamaCaches f;
  const std::string good = f.caches + "/a.kvz";
  const auto size = std::filesystem::file_size(good);
  std::filesystem::copy_file(good, f.caches + "/trunc.kvz");
  std::filesystem::resize_file(f.caches + "/trunc.kvz", size / 2);
  std::filesystem::copy_file(good, f.caches + "/corrupt.kvz");
  {
    std::fstream io(f.caches + "/corrupt.kvz", std::ios::in | std::ios::out | std::ios::binary);
    const auto at = static_cast<std::streamoff>(size / 2 + 7);  // inside the K/V rows
    io.seekg(at);
    char c = 0;
    io.get(c);
    io.seekp(at);
    io.put(static_cast<char>(c ^ 0x5a));
  }
  ServerOptions so;
  so.caches_dir = f.caches;
  Served s(*f.model, so);
  for (const char* id : {"trunc", "a+trunc", "corrupt", "a+corrupt"}) {
    auto r = s.ask(id);
    REQUIRE(r);
    INFO(id << ": " << r->body);
    CHECK(r->status == 422);
    const std::string code = code_of(r);
    CHECK((code == "truncated" || code == "checksum_mismatch" || code == "corrupt"));
    CHECK(r->body.find(std::string(id).substr(std::string(id).find('+') + 1)) != std::string::npos);
  }
  httplib::Client cli("127.0.0.1", s.port);
  auto metrics = cli.Get("/metrics");
  REQUIRE(metrics);
  CHECK(metrics->body.find("kvzip_cache_errors_total{code=\"truncated\"} 2") != std::string::npos);
  auto ok = s.ask("a+b");  // the good caches still answer
  REQUIRE(ok);
  CHECK(ok->status == 200);
}

TEST_CASE("serve: a cache larger than the whole budget is a 422 with no Retry-After",
          "[serve][compose]") {
  LlamaCaches f;
  ServerOptions so;
  so.caches_dir = f.caches;
  so.max_loaded_bytes = 1000;  // less than any cache
  Served s(*f.model, so);
  auto r = s.ask("a");
  REQUIRE(r);
  INFO(r->body);
  CHECK(r->status == 422);
  CHECK(code_of(r) == "cache_too_large");
  CHECK(!r->has_header("Retry-After"));
  CHECK(r->body.find("\\\"a\\\"") != std::string::npos);
}

TEST_CASE("serve: --max-compose above 16 composes that many", "[serve][compose]") {
  LlamaCaches f;
  ServerOptions so;
  so.caches_dir = f.caches;
  so.max_compose = 18;
  so.compose_blend = 0.0;
  Served s(*f.model, so);
  std::string ids = "a";
  for (int i = 1; i < 17; ++i) ids += i % 2 ? "+b" : "+a";
  auto r = s.ask(ids);
  REQUIRE(r);
  INFO(r->body);
  CHECK(r->status == 200);
}

TEST_CASE("serve: a body to a path no route has is a 404", "[serve]") {
  LlamaCaches f;
  ServerOptions so;
  so.caches_dir = f.caches;
  Served s(*f.model, so);
  httplib::Client cli("127.0.0.1", s.port);
  for (const char* path : {"/v1/", "/v1/caches/a/b", "/nowhere"}) {
    auto put = cli.Put(path, "some body", "application/octet-stream");
    REQUIRE(put);
    INFO(path << ": " << put->body);
    CHECK(put->status == 404);
  }
  auto post = cli.Post("/v1/nowhere", "{}", "application/json");
  REQUIRE(post);
  CHECK(post->status == 404);
}

TEST_CASE("engine: a single-cache request completes while a composition is still composing",
          "[serve][compose]") {
  LlamaCaches f;
  CacheStore store(*f.model, f.caches, uint64_t(1) << 30);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> entered;
  EngineOptions eo = test::engine_options(2, 4, 64);
  eo.before_compose = [&, released] {
    entered.set_value();
    released.wait();  // held until the single-cache request has finished
  };
  Engine engine(*f.model, eo);
  test::Sink composed, single;
  RequestSpec cs = test::request_for(*f.model, store, "a", kQuestion, 4);
  cs.more.push_back(store.acquire("b"));
  REQUIRE(engine.submit(std::move(cs), composed.callbacks()));
  entered.get_future().wait();  // the composition has started
  REQUIRE(engine.submit(test::request_for(*f.model, store, "a", kQuestion, 4), single.callbacks()));
  const bool single_done =
      single.result.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  const bool composed_pending =
      composed.result.wait_for(std::chrono::seconds(0)) != std::future_status::ready;
  release.set_value();
  CHECK(single_done);
  CHECK(composed_pending);
  REQUIRE(single_done);
  CHECK(single.result.get().finish != Finish::Error);
  CHECK(single.tokens == test::query_answer(*f.model, f.caches + "/a.kvz", kQuestion, 4));
  CHECK(composed.result.get().finish != Finish::Error);
  CHECK(!composed.tokens.empty());
}
