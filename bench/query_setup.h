// Shared by the benchmarks that answer from .kvz files (bench_kvq, bench_query): the real model
// ($KVZIP_MODEL or the cache), the question they all ask, and the session options, for `threads`
// threads; and the decode speed of an answer.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "checkpoint/model_path.h"
#include "loader/loader.h"
#include "model/model.h"

namespace kvzip::bench {

struct QuerySetup {
  std::unique_ptr<model::Model> model;
  std::string question = "Who was the duke in the battle of Hastings?";
  loader::SessionOptions session;
};

inline QuerySetup query_setup(uint32_t threads) {
  model::LoadOptions lo;
  lo.threads = threads;
  QuerySetup q;
  q.model = model::Model::load(model::resolve_model_path(""), lo);
  q.session.threads = threads;
  return q;
}

// Seconds per decoded token, the first token (which carries the question's prefill) left out.
inline double decode_step_s(const loader::Answer& a) {
  return (a.ms - a.first_token_ms) / 1e3 / double(a.tokens.size() - 1);
}

}  // namespace kvzip::bench
