// Retrieval and composition from a folder of real .kvz files (library/library.h) on a tiny
// random-weight model: the caches chosen fit the context, `kvzip ask` answers as a composed query
// session over its sources, the server's library model gives the same answer and sources,
// GET /v1/search ranks as the index does and follows a deletion, and the errors of a folder
// without this model's caches.
#include <catch2/catch.hpp>

#include <httplib.h>

#include <filesystem>
#include <thread>

#include "common/error.h"
#include "common/json.h"
#include "library/library.h"
#include "loader/loader.h"
#include "serve/server.h"
#include "tests/serve/support.h"
#include "tests/support/run_cli.h"
#include "tests/support/thrown.h"
#include "tests/support/tiny_model_dir.h"

using namespace kvzip;

namespace {

const char* kDocs[] = {
    "The lighthouse keeper counted ships every night and wrote their names in a green notebook.",
    "Mira planted seven apple trees behind the school; the third tree never bloomed.",
    "The ferryman painted a new number on his boat every spring, out of spite for the mayor."};
const char* kIds[] = {"lighthouse", "orchard", "ferry"};

struct Fixture : test::TinyModelDir {
  std::string caches;
  explicit Fixture(uint64_t seed = 31) : TinyModelDir("library_ask", seed, 1024, 2) {
    caches = path("caches");
    std::filesystem::create_directories(caches);
    for (int i = 0; i < 3; ++i)
      test::compress_document(*model, kDocs[i], caches + "/" + kIds[i] + ".kvz");
  }
};

const char* kQuestion = "What did the ferryman paint on his boat?";

std::vector<std::string> ids_of(const std::vector<library::Hit>& hits) {
  std::vector<std::string> out;
  for (const auto& h : hits) out.push_back(h.id);
  return out;
}

}  // namespace

TEST_CASE("ask: the retrieved caches composed answer as kvzip ask and the server's library model",
          "[library][serve][cli]") {
  Fixture f;
  library::Index index(f.caches);
  index.refresh();
  const library::Selection sel = library::retrieve(index, *f.model, kQuestion, 4, 8);
  REQUIRE(!sel.sources.empty());
  CHECK(sel.sources[0].id == "ferry");
  std::vector<std::string> paths;
  for (const auto& h : sel.sources) paths.push_back(h.path);

  const testing::CliResult r = testing::run_kvzip(
      {"ask", f.caches, kQuestion, "-m", f.path("m.gguf"), "--json", "-n", "8", "-t", "2", "-q"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const Json cli = parse_json(r.out, "ask");
  std::vector<std::string> cli_ids;
  for (const auto& s : cli["sources"]) cli_ids.push_back(s["id"].get<std::string>());
  CHECK(cli_ids == ids_of(sel.sources));

  // The CLI's answer is the composed session's over the same caches.
  loader::SessionOptions so;
  so.threads = 2;
  loader::QuerySession session(*f.model, paths, so);
  model::GenerateParams gp;
  gp.max_tokens = 8;
  gp.stop_tokens = f.model->chat().stop_tokens();
  CHECK(cli["answer"].get<std::string>() == session.ask(kQuestion, gp).text);

  serve::ServerOptions sopt;
  sopt.caches_dir = f.caches;
  sopt.port = 0;
  sopt.engine = test::engine_options(2, 8, 64);
  sopt.access_log = false;
  serve::Server server(*f.model, sopt);
  const int port = server.bind();
  std::thread t([&] { server.listen(); });
  httplib::Client http("127.0.0.1", port);
  const Json body = {{"model", "@library"},
                     {"max_tokens", 8},
                     {"temperature", 0},
                     {"messages", Json::array({{{"role", "user"}, {"content", kQuestion}}})}};
  auto res = http.Post("/v1/chat/completions", body.dump(), "application/json");
  REQUIRE(res);
  INFO(res->body);
  REQUIRE(res->status == 200);
  const Json served = parse_json(res->body, "response");
  CHECK(served["choices"][0]["message"]["content"].get<std::string>() ==
        cli["answer"].get<std::string>());
  std::vector<std::string> served_ids;
  for (const auto& s : served["sources"]) served_ids.push_back(s["id"].get<std::string>());
  CHECK(served_ids == cli_ids);
  // Streamed: every chunk names the sources. Query syntax in the question is only words.
  Json streamed = body;
  streamed["stream"] = true;
  streamed["messages"][0]["content"] = "ferryman\" AND (boat* NEAR(";
  res = http.Post("/v1/chat/completions", streamed.dump(), "application/json");
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(res->body.find("\"sources\":[{\"id\":\"ferry\"") != std::string::npos);
  CHECK(res->body.find("data: [DONE]") != std::string::npos);
  // Another name for the library model is refused when it could name a cache.
  serve::ServerOptions clash = sopt;
  clash.library_model = "library";
  CHECK(test::error_from([&] { serve::Server(*f.model, clash); }).code() == Errc::invalid_argument);

  auto search = http.Get("/v1/search?q=ferryman%20boat&k=1");
  REQUIRE(search);
  REQUIRE(search->status == 200);
  const Json ranked = parse_json(search->body, "search");
  REQUIRE(ranked["data"].size() == 1);
  CHECK(ranked["data"][0]["id"] == "ferry");
  auto bad_k = http.Get("/v1/search?q=boat&k=zero");
  REQUIRE(bad_k);
  CHECK(bad_k->status == 400);

  // A deleted cache leaves the ranking at once.
  auto del = http.Delete("/v1/caches/ferry");
  REQUIRE(del);
  CHECK(del->status == 200);
  search = http.Get("/v1/search?q=ferryman%20boat&k=4");
  REQUIRE(search);
  const Json ranking = parse_json(search->body, "search");  // the loop reads into it: keep it alive
  for (const auto& h : ranking["data"]) CHECK(h["id"] != "ferry");
  // A corrupt file is counted in /metrics once a refresh has seen it.
  {
    std::FILE* fp = std::fopen((f.caches + "/broken.kvz").c_str(), "wb");
    std::fputs("not a cache", fp);
    std::fclose(fp);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  REQUIRE(http.Get("/v1/search?q=boat"));
  auto metrics = http.Get("/metrics");
  REQUIRE(metrics);
  CHECK(metrics->body.find("kvzip_library_skipped_caches 1") != std::string::npos);
  server.stop(std::chrono::milliseconds(1000));
  t.join();
}

TEST_CASE("ask: what fits the context, another model's folder, an empty or missing folder",
          "[library][cli]") {
  Fixture f;
  library::Index index(f.caches);
  index.refresh();
  const auto hits = index.search(kQuestion, 4, &f.model->fingerprint());
  REQUIRE(hits.size() >= 2);
  // Room for the first cache alone: the others are left out, each with the reason.
  const library::Selection first = library::select_sources(*f.model, {hits[0]}, kQuestion, 0);
  const uint32_t room =
      f.model->config().max_context - first.length -
      static_cast<uint32_t>(
          loader::question_tokens(f.model->tokenizer(),
                                  format::CacheReader::open(hits[0].path).header(), kQuestion)
              .size());
  const library::Selection tight = library::select_sources(*f.model, hits, kQuestion, room);
  CHECK(ids_of(tight.sources) == std::vector<std::string>{hits[0].id});
  REQUIRE(tight.left_out.size() == hits.size() - 1);
  CHECK(tight.why[0].find("does not fit") != std::string::npos);
  const uint32_t all = f.model->config().max_context;  // no cache fits with this answer budget
  CHECK(test::error_from([&] { library::retrieve(index, *f.model, kQuestion, 4, all); }).code() ==
        Errc::invalid_argument);
  CHECK(test::error_from([&] { library::retrieve(index, *f.model, "?!", 4, 8); }).code() ==
        Errc::not_found);

  // Another model's caches only.
  test::TinyModelDir other("library_other", 77, 1024, 2);
  const Error e =
      test::error_from([&] { library::retrieve(index, *other.model, kQuestion, 4, 8); });
  CHECK(e.code() == Errc::not_found);
  CHECK(std::string(e.what()).find("other models") != std::string::npos);

  const std::string empty = f.path("empty");
  std::filesystem::create_directories(empty);
  testing::CliResult r =
      testing::run_kvzip({"ask", empty, kQuestion, "-m", f.path("m.gguf"), "-q"});
  CHECK(r.exit_code == 3);
  CHECK(r.err.find("holds no cache") != std::string::npos);
  r = testing::run_kvzip({"search", f.path("nope"), kQuestion});
  CHECK(r.exit_code == 3);
  CHECK(r.err.find("no folder") != std::string::npos);
  r = testing::run_kvzip({"index", f.caches});
  CHECK(r.exit_code == 0);
  CHECK(r.err.find("3 caches") != std::string::npos);
  r = testing::run_kvzip({"search", f.caches, "green notebook", "--json"});
  REQUIRE(r.exit_code == 0);
  CHECK(parse_json(r.out, "search")["sources"][0]["id"] == "lighthouse");
}
