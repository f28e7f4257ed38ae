// Test support for the serve/ engine tests: a kvzip-compressed .kvz of a document on a test
// model, the answer `kvzip query` gives from a file, a request for the engine, EngineOptions in
// one line, and a Sink that collects one request's tokens and result.
#pragma once
#include <cstdint>
#include <future>
#include <string>
#include <vector>

#include "format/format.h"
#include "model/model.h"
#include "serve/cache_store.h"
#include "serve/engine.h"

namespace kvzip::test {

// Compresses `document` with kvzip at ratio 0.5 (2 threads) into `path`, stored as `kv_dtype`.
void compress_document(const model::Model& model, const std::string& document,
                       const std::string& path, format::DType kv_dtype = format::DType::F32);

// The greedy answer (n tokens at most, the chat's stop tokens) that a QuerySession on `file`
// gives to `question`: what `kvzip query` answers. `quantized`: REQUIREs a quantized session.
std::vector<int32_t> query_answer(const model::Model& model, const std::string& file,
                                  const std::string& question, uint32_t n, bool quantized = false);

// A request for `question` over the cache `id` of `store`, n tokens at most, the chat's stop
// tokens.
serve::RequestSpec request_for(const model::Model& model, serve::CacheStore& store,
                               const std::string& id, const std::string& question, uint32_t n);

serve::EngineOptions engine_options(uint32_t threads, uint32_t parallel, uint32_t step_tokens);

// Collects one request's tokens and result; result.get() blocks until on_done.
struct Sink {
  std::vector<int32_t> tokens;
  std::promise<serve::RequestResult> done;
  std::future<serve::RequestResult> result = done.get_future();
  serve::RequestCallbacks callbacks() {
    return serve::RequestCallbacks{[this](int32_t t) {
                                     tokens.push_back(t);
                                     return true;
                                   },
                                   [this](const serve::RequestResult& r) { done.set_value(r); }};
  }
};

}  // namespace kvzip::test
