// Composed requests in serve/ ("model": "a+b"): on a tiny random-weight model with real .kvz files,
//  - the engine's answers over two composed caches equal a composed QuerySession's (`kvzip query
//    a.kvz+b.kvz`), for one request and for eight at once over the same caches, which stay loaded
//    once each (the LRU counts each cache once however many compositions read it);
//  - over HTTP, an unknown id is a 404, more caches than --max-compose and a composition past the
//    model's context are 400s naming the problem, an empty id between '+' signs is a 400, and a
//    composed answer is a 200.
#include <catch2/catch.hpp>

#include <httplib.h>

#include <filesystem>
#include <thread>

#include "common/json.h"
#include "loader/loader.h"
#include "serve/cache_store.h"
#include "serve/engine.h"
#include "serve/server.h"
#include "tests/serve/support.h"
#include "tests/support/tiny_model_dir.h"

using namespace kvzip;
using namespace kvzip::serve;

namespace {

const char* kDocs[] = {
    "The lighthouse keeper counted ships every night. In winter the harbor froze and the keeper "
    "read old letters from his sister, who lived in a city of bridges far to the south.",
    "Mira planted seven apple trees behind the school. The third tree never bloomed, so the "
    "children painted its branches blue every spring and called it the quiet tree."};

struct Fixture : test::TinyModelDir {
  std::string caches;
  Fixture() : TinyModelDir("serve_compose", 21, 1024) {
    caches = path("caches");
    std::filesystem::create_directories(caches);
    test::compress_document(*model, kDocs[0], caches + "/doc0.kvz");
    test::compress_document(*model, kDocs[1], caches + "/doc1.kvz", format::DType::Q8);
  }
};

const char* kQuestion = "Who counted ships, and how many apple trees were planted?";

}  // namespace

TEST_CASE("composed requests answer as a composed query session, alone and eight at once",
          "[serve][compose]") {
  Fixture f;
  loader::SessionOptions so;
  so.threads = 2;
  loader::QuerySession session(
      *f.model, std::vector<std::string>{f.caches + "/doc0.kvz", f.caches + "/doc1.kvz"}, so);
  model::GenerateParams gp;
  gp.max_tokens = 10;
  gp.stop_tokens = f.model->chat().stop_tokens();
  const std::vector<int32_t> want = session.ask(kQuestion, gp).tokens;

  CacheStore store(*f.model, f.caches, uint64_t(1) << 30);
  Engine engine(*f.model, test::engine_options(2, 8, 64));
  std::vector<std::unique_ptr<test::Sink>> sinks;
  for (int i = 0; i < 8; ++i) {
    RequestSpec s = test::request_for(*f.model, store, "doc0", kQuestion, 10);
    s.more.push_back(store.acquire("doc1"));
    sinks.push_back(std::make_unique<test::Sink>());
    REQUIRE(engine.submit(std::move(s), sinks.back()->callbacks()));
  }
  for (auto& s : sinks) {
    CHECK(s->result.get().finish != Finish::Error);
    CHECK(s->tokens == want);
  }
  CHECK(store.loaded_count() == 2);
  CHECK(store.loaded_bytes() == store.acquire("doc0")->bytes + store.acquire("doc1")->bytes);

  // A composition past the model's context is refused at submit.
  RequestSpec big = test::request_for(*f.model, store, "doc0", kQuestion, 10);
  for (int i = 0; i < 40; ++i) big.more.push_back(store.acquire(i % 2 ? "doc0" : "doc1"));
  big.compose.max_docs = 64;
  try {
    engine.submit(std::move(big), test::Sink().callbacks());
    FAIL("expected Errc::invalid_argument");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::invalid_argument);
    CHECK(std::string(e.what()).find("context") != std::string::npos);
  }
}

TEST_CASE("composed requests over HTTP: 200, unknown id 404, too many caches 400",
          "[serve][compose]") {
  Fixture f;
  ServerOptions so;
  so.caches_dir = f.caches;
  so.port = 0;
  so.max_compose = 3;
  so.access_log = false;
  so.engine = test::engine_options(2, 4, 64);
  Server server(*f.model, so);
  const int port = server.bind();
  std::thread t([&] { server.listen(); });
  httplib::Client cli("127.0.0.1", port);
  auto ask = [&](const std::string& model) {
    const Json body = {{"model", model},
                       {"max_tokens", 4},
                       {"temperature", 0},
                       {"messages", Json::array({{{"role", "user"}, {"content", kQuestion}}})}};
    return cli.Post("/v1/chat/completions", body.dump(), "application/json");
  };
  auto ok = ask("doc0+doc1");
  REQUIRE(ok);
  CHECK(ok->status == 200);
  auto missing = ask("doc0+nosuch");
  REQUIRE(missing);
  CHECK(missing->status == 404);
  CHECK(missing->body.find("nosuch") != std::string::npos);
  auto many = ask("doc0+doc1+doc0+doc1");
  REQUIRE(many);
  CHECK(many->status == 400);
  CHECK(many->body.find("at most 3") != std::string::npos);
  auto bad = ask("doc0++doc1");
  REQUIRE(bad);
  CHECK(bad->status == 400);
  server.stop(std::chrono::milliseconds(1000));
  t.join();
}
