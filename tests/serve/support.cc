#include "tests/serve/support.h"

#include <catch2/catch.hpp>

#include "compress/pipeline.h"
#include "loader/loader.h"

namespace kvzip::test {

void compress_document(const model::Model& model, const std::string& document,
                       const std::string& path, format::DType kv_dtype) {
  compress::CompressFileOptions o;
  o.compress.method = "kvzip";
  o.compress.ratio = 0.5;
  o.compress.scorer = compress::make_scorer_options(model.chat(), 512, 0);
  o.kv.dtype = kv_dtype;
  o.threads = 2;
  compress::compress_to_file(model, document, o, path);
}

std::vector<int32_t> query_answer(const model::Model& model, const std::string& file,
                                  const std::string& question, uint32_t n, bool quantized) {
  loader::SessionOptions so;
  so.threads = 2;
  loader::QuerySession s(model, file, so);
  if (quantized) REQUIRE(s.quantized());
  model::GenerateParams gp;
  gp.max_tokens = n;
  gp.stop_tokens = model.chat().stop_tokens();
  return s.ask(question, gp).tokens;
}

serve::RequestSpec request_for(const model::Model& model, serve::CacheStore& store,
                               const std::string& id, const std::string& question, uint32_t n) {
  serve::RequestSpec r;
  r.cache = store.acquire(id);
  r.prompt = loader::question_tokens(model.tokenizer(), r.cache->header, question);
  r.max_tokens = n;
  r.stop_tokens = model.chat().stop_tokens();
  return r;
}

serve::EngineOptions engine_options(uint32_t threads, uint32_t parallel, uint32_t step_tokens) {
  serve::EngineOptions eo;
  eo.threads = threads;
  eo.parallel = parallel;
  eo.step_tokens = step_tokens;
  return eo;
}

}  // namespace kvzip::test
