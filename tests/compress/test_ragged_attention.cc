// Ragged attention equals dense masked attention: a document prefilled densely, evicted to random
// per-(layer, head) keep sets through RaggedKvCache::from_dense, then question tokens run through
// Forward on the ragged cache, must give the logits of a naive forward in which the question's
// queries see only the kept document rows (the document's own rows were computed unmasked).
#include <catch2/catch.hpp>

#include <random>

#include "cache/kv_cache.h"
#include "cache/ragged_cache.h"
#include "model/forward.h"
#include "tests/compress/support.h"
#include "tests/support/random_weights.h"

using namespace kvzip;

TEST_CASE("ragged attention over kept rows equals dense attention with evicted rows masked",
          "[compress]") {
  const bool qwen = GENERATE(false, true);
  const uint64_t seed = GENERATE(1, 2);
  const ModelConfig cfg = qwen ? test::tiny_qwen2_config() : test::tiny_llama_config();
  INFO("model " << cfg.arch << " seed " << seed);
  const model::Weights w = test::random_weights(cfg, 50 + seed);
  const uint32_t n_doc = 33, n_q = 7, L = cfg.n_layers, H = cfg.n_kv_heads;
  auto doc = test::random_tokens(n_doc, cfg.vocab_size, 60 + seed);
  auto question = test::random_tokens(n_q, cfg.vocab_size, 70 + seed);

  // Random keep sets, different per (layer, head); one head keeps nothing, one keeps everything.
  std::mt19937_64 rng(seed);
  std::vector<std::vector<uint32_t>> keep(L * H);
  for (size_t i = 0; i < keep.size(); ++i)
    for (uint32_t j = 0; j < n_doc; ++j)
      if (i == 1 || (i != 2 && rng() % 3 == 0)) keep[i].push_back(j);
  std::vector<std::vector<bool>> visible(L * H, std::vector<bool>(n_doc, false));
  for (size_t i = 0; i < keep.size(); ++i)
    for (uint32_t j : keep[i]) visible[i][j] = true;

  model::Forward fwd(w, model::ForwardOptions{2, 4, {}});  // question spans two chunks
  model::KvCache dense(cfg);
  fwd.prefill(dense, doc, model::LogitsMode::None);
  model::RaggedKvCache ragged =
      model::RaggedKvCache::from_dense(dense, keep, 2);  // room grows on the way
  const std::vector<float> got = fwd.prefill(ragged, question, model::LogitsMode::All);

  std::vector<int32_t> all = doc;
  all.insert(all.end(), question.begin(), question.end());
  const std::vector<float> ref =
      test::naive_forward(w, all, [&](uint32_t l, uint32_t h, uint32_t q, uint32_t k) {
        return q < n_doc || k >= n_doc || visible[l * H + h][k];
      }).logits;
  const std::vector<float> want(ref.begin() + size_t(n_doc) * cfg.vocab_size, ref.end());
  CHECK(test::rel_error(got, want) < 1e-4);

  // The masking matters: attending to every row gives different logits.
  const std::vector<float> unmasked = fwd.prefill(dense, question, model::LogitsMode::All);
  CHECK(test::rel_error(unmasked, want) > 1e-3);
}
