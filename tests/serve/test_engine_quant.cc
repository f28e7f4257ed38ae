// serve/ over q4 files: the store loads a q8/q4 cache as its stored rows (KvBase holding a
// QuantBase), counts those bytes in its budget, and every request attends to that one shared base
// through its own BranchCache. Eight requests over one q4 cache, batched, answer token for token
// as `kvzip query` does on the same file (its quantized session); the store holds the cache once.
#include <catch2/catch.hpp>

#include <filesystem>
#include <future>

#include "common/error.h"
#include "compress/pipeline.h"
#include "loader/loader.h"
#include "serve/cache_store.h"
#include "serve/engine.h"
#include "tests/serve/support.h"
#include "tests/support/tiny_model_dir.h"

using namespace kvzip;
using namespace kvzip::serve;

namespace {

const char* kDoc =
    "The lighthouse keeper counted ships every night. In winter the harbor froze and the keeper "
    "read old letters from his sister, who lived in a city of bridges far to the south. Mira "
    "planted seven apple trees behind the school; the third never bloomed, so the children "
    "painted its branches blue every spring and called it the quiet tree.";

const char* kQuestions[] = {"Who counted ships?", "How many apple trees were planted?",
                            "Where did the sister live?", "What color were the branches?"};

struct Fixture : test::TinyModelDir {
  std::string caches;
  Fixture() : TinyModelDir("serveq", 23, 1024) {
    caches = path("caches");
    std::filesystem::create_directories(caches);
    test::compress_document(*model, kDoc, caches + "/q4.kvz", format::DType::Q4);
  }

  std::vector<int32_t> want(const std::string& q, uint32_t n) const {
    return test::query_answer(*model, caches + "/q4.kvz", q, n, /*quantized=*/true);
  }
};

using test::Sink;

}  // namespace

TEST_CASE("served requests share one quantized base and answer as kvzip query does",
          "[serve][kvquant-attn]") {
  Fixture f;
  CacheStore store(*f.model, f.caches, uint64_t(1) << 30);
  const std::shared_ptr<const LoadedCache> held = store.acquire("q4");
  REQUIRE(held->cache.quantized());
  CHECK(held->bytes == held->cache.quant().bytes_kept());
  CHECK(store.loaded_bytes() == held->bytes);
  const model::RaggedKvCache f32 =
      loader::cache_from_reader(format::CacheReader::open(f.caches + "/q4.kvz"), 1);
  CHECK(held->bytes < f32.bytes_kept() / 2);  // D = 16: parameters weigh more than at D = 64

  Engine engine(*f.model, test::engine_options(
                              2, 8, 24));  // step 24: questions go in pieces while others decode
  std::vector<std::unique_ptr<Sink>> sinks;
  for (int i = 0; i < 8; ++i) {
    RequestSpec r = test::request_for(*f.model, store, "q4", kQuestions[i % 4], 10);
    CHECK(r.cache.get() == held.get());  // the one loaded base, shared
    sinks.push_back(std::make_unique<Sink>());
    REQUIRE(engine.submit(r, sinks.back()->callbacks()));
  }
  for (size_t i = 0; i < sinks.size(); ++i) {
    const RequestResult r = sinks[i]->result.get();
    INFO("request " << i << ": " << kQuestions[i % 4] << " " << r.error);
    CHECK(r.finish != Finish::Error);
    CHECK(sinks[i]->tokens == f.want(kQuestions[i % 4], 10));
  }
  CHECK(store.loaded_count() == 1);
  CHECK(store.loaded_bytes() == held->bytes);
}
