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
    compress::CompressFileOptions o;
    o.compress.method = "kvzip";
    o.compress.ratio = 0.5;
    o.compress.scorer = compress::make_scorer_options(model->chat(), 512, 0);
    o.kv_dtype = format::DType::Q4;
    o.threads = 2;
    compress::compress_to_file(*model, kDoc, o, caches + "/q4.kvz");
  }

  std::vector<int32_t> want(const std::string& q, uint32_t n) const {
    loader::SessionOptions so;
    so.threads = 2;
    loader::QuerySession s(*model, caches + "/q4.kvz", so);
    REQUIRE(s.quantized());
    model::GenerateParams gp;
    gp.max_tokens = n;
    gp.stop_tokens = model->chat().stop_tokens();
    return s.ask(q, gp).tokens;
  }
};

struct Sink {
  std::vector<int32_t> tokens;
  std::promise<RequestResult> done;
  std::future<RequestResult> result = done.get_future();
  RequestCallbacks callbacks() {
    return RequestCallbacks{[this](int32_t t) { tokens.push_back(t); return true; },
                            [this](const RequestResult& r) { done.set_value(r); }};
  }
};

}  // namespace

TEST_CASE("served requests share one quantized base and answer as kvzip query does",
          "[serve][kvquant-attn]") {
  Fixture f;
  CacheStore store(*f.model, f.caches, uint64_t(1) << 30);
  const std::shared_ptr<const LoadedCache> held = store.acquire("q4");
  REQUIRE(held->cache.quantized());
  CHECK(held->bytes == held->cache.quant().bytes_kept());
  CHECK(store.loaded_bytes() == held->bytes);
  const model::RaggedKvCache f32 = loader::cache_from_reader(format::CacheReader::open(f.caches + "/q4.kvz"), 1);
  CHECK(held->bytes < f32.bytes_kept() / 2);  // D = 16: parameters weigh more than at D = 64

  EngineOptions eo;
  eo.threads = 2;
  eo.parallel = 8;
  eo.step_tokens = 24;  // questions go in pieces while others decode
  Engine engine(*f.model, eo);
  std::vector<std::unique_ptr<Sink>> sinks;
  for (int i = 0; i < 8; ++i) {
    RequestSpec r;
    r.cache = store.acquire("q4");
    CHECK(r.cache.get() == held.get());  // the one loaded base, shared
    r.prompt = loader::question_tokens(f.model->tokenizer(), r.cache->header, kQuestions[i % 4]);
    r.max_tokens = 10;
    r.stop_tokens = f.model->chat().stop_tokens();
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
