// loader::SessionOptions::key_tiles: a query session over an f32 cache keeps its keys transposed
// too (RaggedKvCache::make_key_tiles) and answers exactly as without them; the memory it reports
// counts them; turned off, the keys are held once.
#include <catch2/catch.hpp>

#include "compress/pipeline.h"
#include "loader/loader.h"
#include "tests/support/tiny_model_dir.h"

using namespace kvzip;
using kvzip::compress::CompressFileOptions;
using kvzip::model::GenerateParams;

TEST_CASE("query sessions answer the same with and without key tiles", "[loader]") {
  test::TinyModelDir dir("session_tiles", 23, 1024);
  CompressFileOptions o;
  o.compress.method = "kvzip";
  o.compress.ratio = 0.5;
  o.compress.scorer = compress::make_scorer_options(dir.model->chat(), 512, 0);
  o.threads = 2;
  const std::string path = dir.path("doc.kvz");
  compress::compress_to_file(
      *dir.model,
      "The lighthouse keeper counted ships every night. In winter the harbor froze and "
      "the keeper read old letters from his sister, who lived in a city of bridges.",
      o, path);
  GenerateParams gp;
  gp.max_tokens = 12;
  loader::SessionOptions with, without;
  with.threads = without.threads = 2;
  without.key_tiles = false;
  loader::QuerySession a(*dir.model, path, with), b(*dir.model, path, without);
  const uint64_t k_bytes = a.base().bytes_kept() / 2;
  CHECK(a.base().bytes_in_memory() >= a.base().bytes_kept() + k_bytes);
  CHECK(b.base().bytes_in_memory() == b.base().bytes_kept());
  for (const char* q : {"Who counted ships?", "Where did his sister live?"}) {
    const auto x = a.ask(q, gp), y = b.ask(q, gp);
    CHECK(x.tokens.size() == 12);
    CHECK(x.tokens == y.tokens);
  }
}
