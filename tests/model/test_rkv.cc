// R-KV (model/rkv.h): the score against the plain reference of tests/support/rkv_reference.h
// (redundancy over all candidates, the window included), the keep selection,
// RaggedKvCache::retain, and generation on a tiny random-weight model: the cache stays within
// budget + buffer candidates over 2,000+ tokens, and without eviction the tokens equal plain
// generation. The two terms' own checks are tests/kernels/test_rkv.cc.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string_view>
#include <utility>

#include "cache/ragged_cache.h"
#include "common/error.h"
#include "model/model.h"
#include "model/rkv.h"
#include "tests/support/random_weights.h"
#include "tests/support/rkv_reference.h"
#include "tests/support/thrown.h"

using namespace kvzip;

namespace {

// Random keys where every third row is a noisy copy of an earlier one, so many pairs exceed T.
std::vector<float> keys_with_repeats(uint32_t N, uint32_t D, uint64_t seed) {
  std::vector<float> k = test::random_vector(size_t(N) * D, seed);
  const std::vector<float> noise = test::random_vector(size_t(N) * D, seed + 7, -0.2f, 0.2f);
  for (uint32_t i = 3; i < N; i += 3)
    for (uint32_t d = 0; d < D; ++d) k[i * D + d] = k[(i / 2) * D + d] + noise[i * D + d];
  return k;
}

ModelConfig long_config() {
  ModelConfig c = test::tiny_llama_config();
  c.max_context = 8192;
  return c;
}

model::RaggedKvCache empty_ragged(const ModelConfig& cfg) {
  const model::CacheShape s = model::cache_shape(cfg);
  return model::RaggedKvCache(s, 0, std::vector<uint32_t>(size_t(s.n_layers) * s.n_kv_heads, 0),
                              16);
}

// Candidate rows (positions >= first) of every head.
uint32_t max_candidates(const model::RaggedKvCache& c, uint32_t first) {
  uint32_t most = 0;
  for (uint32_t l = 0; l < c.shape().n_layers; ++l)
    for (uint32_t h = 0; h < c.shape().n_kv_heads; ++h) {
      const model::KvHeadView v = c.view(l, h);
      const uint32_t n = static_cast<uint32_t>(
          v.positions + v.len - std::lower_bound(v.positions, v.positions + v.len, first));
      most = std::max(most, n);
    }
  return most;
}

const std::vector<int32_t> kPrompt = {1, 5, 9, 33, 2, 71, 40, 12, 8, 60, 3};

}  // namespace

TEST_CASE("R-KV scores equal λ·importance − (1−λ)·redundancy over all candidates", "[model][rkv]") {
  const uint32_t N = 70, D = 16, A = 8, G = 3;
  for (uint64_t seed : {1u, 2u, 3u}) {
    const std::vector<float> keys = keys_with_repeats(N, D, seed);
    const std::vector<float> q = test::random_vector(size_t(A) * G * D, seed + 100, -2.0f, 2.0f);
    model::RkvParams p;
    p.budget = 40;
    const model::RkvHeadInput in{keys.data(), N, q.data(), A, G, D, 1.0f / 4.0f};
    const uint32_t M = N - p.window;
    const std::vector<double> I =
        test::rkv_importance(q.data(), A, G * D, G, D, 0.25, keys.data(), M, 7);
    const std::vector<double> R = test::rkv_redundancy(keys.data(), N, D, p.threshold);
    const std::vector<float> z = model::rkv_scores(in, p);
    REQUIRE(z.size() == M);
    for (uint32_t j = 0; j < M; ++j)
      REQUIRE(z[j] == Approx(0.1 * I[j] - 0.9 * R[j]).epsilon(1e-4).margin(1e-7));
  }
}

TEST_CASE("the keep list is the budget minus window best scores plus the window", "[model][rkv]") {
  model::RkvParams p;
  p.budget = 5;
  p.window = 2;
  const std::vector<float> z = {0.3f, 0.9f, 0.1f, 0.9f, 0.5f, 0.0f};  // N = 8, scored rows 0..5
  CHECK(model::rkv_keep(z, 8, p) == std::vector<uint32_t>{1, 3, 4, 6, 7});
  p.budget = 4;  // tie between rows 1 and 3 goes to the more recent row
  CHECK(model::rkv_keep(z, 8, p) == std::vector<uint32_t>{1, 3, 6, 7});
}

TEST_CASE("R-KV parameters out of range are refused with invalid_argument", "[model][rkv]") {
  auto refused = [](model::RkvParams p) {
    return test::throws_code([&] { validate(p); }, Errc::invalid_argument);
  };
  model::RkvParams ok;
  ok.budget = 9;
  CHECK_NOTHROW(validate(ok));
  model::RkvParams p = ok;
  p.budget = 8;  // < window + 1
  CHECK(refused(p));
  p = ok, p.buffer = 0;
  CHECK(refused(p));
  p = ok, p.kernel = 6;
  CHECK(refused(p));
  p = ok, p.lambda = 1.5f;
  CHECK(refused(p));
  p = ok, p.streaming = true, p.budget = 4;
  CHECK(refused(p));
}

TEST_CASE("retain compacts one head in place and reset still restores the base",
          "[model][rkv][ragged]") {
  const model::CacheShape s{1, 2, 2};
  model::KvCache dense(s);
  dense.reserve_append(3);
  const std::vector<float> base = {0, 0, 10, 10, 1, 1, 11, 11, 2, 2, 12, 12};  // (T=3, H=2, D=2)
  dense.append(0, base.data(), base.data(), 3);
  dense.commit_append(3);
  model::RaggedKvCache c = model::RaggedKvCache::from_dense(dense, {{0, 1, 2}, {0, 2}}, 2);
  for (int step = 0; step < 4; ++step) {  // positions 3..6, values 100 + position
    c.reserve_append(1);
    const float x = 100.0f + 3 + step;
    const std::vector<float> kv = {x, x, x, x};
    c.append(0, kv.data(), kv.data(), 1);
    c.commit_append(1);
  }
  const std::vector<uint32_t> keep = {0, 1, 2, 4, 6};  // head 0: base rows + positions 4, 6
  c.retain(0, 0, keep);
  model::KvHeadView v = c.view(0, 0);
  REQUIRE(v.len == 5);
  CHECK(std::vector<uint32_t>(v.positions, v.positions + 5) ==
        std::vector<uint32_t>{0, 1, 2, 4, 6});
  CHECK(v.k[3 * 2] == 104.0f);
  CHECK(v.v[4 * 2 + 1] == 106.0f);
  CHECK(c.kept(0, 0) == 3);
  CHECK(c.view(0, 1).len == 6);  // the other head is untouched
  const std::vector<uint32_t> bad = {1, 1};
  CHECK_THROWS_AS(c.retain(0, 1, bad), Error);
  c.reset();
  CHECK(c.view(0, 0).len == 3);
  CHECK(c.view(0, 1).len == 2);
  CHECK(c.view(0, 1).k[2] == 12.0f);
  // Dropping a base row shrinks the base for good.
  const std::vector<uint32_t> drop = {1};
  c.retain(0, 1, drop);
  c.reset();
  CHECK(c.kept(0, 1) == 1);
  CHECK(c.view(0, 1).positions[0] == 2);
}

TEST_CASE("a 2,100-token R-KV generation never holds more than budget + buffer candidates",
          "[model][rkv]") {
  const ModelConfig cfg = long_config();
  const model::Weights w = test::random_weights(cfg, 21);
  model::Forward fwd(w, model::ForwardOptions{.threads = 1});
  // R-KV over 2,100 tokens; the streaming baseline (same schedule) over a shorter run.
  for (const auto& [streaming, n] : {std::pair{false, 2100u}, std::pair{true, 300u}}) {
    model::RaggedKvCache cache = empty_ragged(cfg);
    model::GenerateParams gp;
    gp.max_tokens = n;
    gp.sampling.temperature = 1.0f;  // sampled, so the text does not settle into one loop
    gp.sampling.seed = 5;
    gp.rkv = model::RkvParams{};
    gp.rkv->budget = 48;
    gp.rkv->buffer = 16;
    gp.rkv->streaming = streaming;
    const uint32_t first = static_cast<uint32_t>(kPrompt.size());
    uint32_t most = 0;
    const model::GenerateResult r = generate(fwd, cache, kPrompt, gp, [&](int32_t) {
      const uint32_t n = max_candidates(cache, first);
      most = std::max(most, n);
      REQUIRE(n < 48 + 16);
      for (uint32_t l = 0; l < cfg.n_layers; ++l)  // prompt rows are never evicted
        for (uint32_t h = 0; h < cfg.n_kv_heads; ++h)
          REQUIRE(cache.view(l, h).positions[first - 1] == first - 1);
      return true;
    });
    REQUIRE(r.tokens.size() == n);
    CHECK(most == 48 + 16 - 1);  // the 64th row arrives in the step that compresses
    // n - 1 rows decoded (the last token is never fed back); checks every 16 decodes, the first
    // that evicts at 64, the last at `last`, which leaves 48 candidates.
    const uint32_t last = (n - 1) / 16 * 16;
    CHECK(r.compressions == (last - 64) / 16 + 1);
    CHECK(r.evicted == uint64_t(cfg.n_layers) * cfg.n_kv_heads * (last - 48));
    if (streaming) {  // sink (first 4 generated rows) plus the most recent rows
      const model::KvHeadView v = cache.view(1, 1);
      for (uint32_t j = 0; j < 4; ++j) CHECK(v.positions[first + j] == first + j);
      CHECK(v.positions[v.len - 1] == cache.logical_length() - 1);
      CHECK(v.positions[first + 4] == cache.logical_length() - (v.len - first - 4));
    }
  }
}

TEST_CASE("with a budget above the generated length R-KV output equals plain generation",
          "[model][rkv]") {
  const ModelConfig cfg = long_config();
  const model::Weights w = test::random_weights(cfg, 22);
  model::Forward fwd(w, model::ForwardOptions{.threads = 1});
  model::GenerateParams gp;
  gp.max_tokens = 200;
  model::KvCache plain_cache(cfg);
  const model::GenerateResult plain = generate(fwd, plain_cache, kPrompt, gp);
  gp.rkv = model::RkvParams{};
  gp.rkv->budget = 200;
  gp.rkv->buffer = 8;
  model::KvCache dense(
      cfg);  // dense: generation runs on a ragged copy, the dense cache stays empty
  const model::GenerateResult a = generate(fwd, dense, kPrompt, gp);
  CHECK(a.tokens == plain.tokens);
  CHECK(a.evicted == 0);
  CHECK(dense.logical_length() == 0);
  model::RaggedKvCache ragged = empty_ragged(cfg);
  const model::GenerateResult b = generate(fwd, ragged, kPrompt, gp);
  CHECK(b.tokens == plain.tokens);
  // A small budget does change the cache, so the comparison above is not vacuous.
  gp.rkv->budget = 20;
  model::RaggedKvCache small = empty_ragged(cfg);
  const model::GenerateResult c = generate(fwd, small, kPrompt, gp);
  CHECK(c.evicted > 0);
  CHECK(max_candidates(small, uint32_t(kPrompt.size())) <= 20 + 8);
}

TEST_CASE("with document candidates R-KV bounds the prompt rows too but never the pinned ones",
          "[model][rkv]") {
  const ModelConfig cfg = long_config();
  const model::Weights w = test::random_weights(cfg, 23);
  model::Forward fwd(w, model::ForwardOptions{.threads = 1});
  std::vector<int32_t> prompt;
  for (int i = 0; i < 150; ++i) prompt.push_back((i * 37 + 11) % int(cfg.vocab_size));
  model::GenerateParams gp;
  gp.max_tokens = 60;
  gp.rkv = model::RkvParams{};
  gp.rkv->budget = 32;
  gp.rkv->buffer = 16;
  gp.rkv->doc_candidates = true;
  gp.rkv->pinned = 5;
  model::RaggedKvCache cache = empty_ragged(cfg);
  const model::GenerateResult r = generate(fwd, cache, prompt, gp, [&](int32_t) {
    REQUIRE(max_candidates(cache, 5) <= 32 + 16);
    for (uint32_t l = 0; l < cfg.n_layers; ++l)
      for (uint32_t h = 0; h < cfg.n_kv_heads; ++h)
        for (uint32_t j = 0; j < 5; ++j) REQUIRE(cache.view(l, h).positions[j] == j);
    return true;
  });
  CHECK(r.tokens.size() == 60);
  CHECK(r.evicted >= uint64_t(cfg.n_layers) * cfg.n_kv_heads * (145 - 32));
}

TEST_CASE("a learned score keeps, at every compression, the best predicted rows plus the window",
          "[model][rkv]") {
  const ModelConfig cfg = long_config();
  const model::Weights w = test::random_weights(cfg, 23);
  const uint32_t L = cfg.n_layers, H = cfg.n_kv_heads, E = cfg.d_model;
  auto coef =
      std::make_shared<const std::vector<float>>(test::random_vector(size_t(L) * H * (E + 1), 24));
  // Every row's prediction, computed here from the hidden states the forward traces.
  std::vector<std::vector<float>> predicted(size_t(L) * H);  // by position
  model::ForwardOptions fo{.threads = 1};
  fo.trace = [&](const model::TraceTensor& t) {
    if (std::string_view(t.name) != "attn_norm") return;
    for (uint32_t r = 0; r < t.rows; ++r)
      for (uint32_t h = 0; h < H; ++h) {
        const float* c = coef->data() + (size_t(t.layer) * H + h) * (E + 1);
        float acc = 0.0f;
        for (uint32_t e = 0; e < E; ++e) acc += c[e] * t.data[size_t(r) * E + e];
        std::vector<float>& p = predicted[size_t(t.layer) * H + h];
        if (p.size() <= t.first_position + r) p.resize(t.first_position + r + 1);
        p[t.first_position + r] = acc + c[E];
      }
  };
  model::Forward fwd(w, fo);
  model::RaggedKvCache cache = empty_ragged(cfg);
  model::GenerateParams gp;
  gp.max_tokens = 400;
  gp.sampling.temperature = 1.0f;
  gp.sampling.seed = 9;
  gp.rkv = model::RkvParams{};
  gp.rkv->budget = 40;
  gp.rkv->buffer = 16;
  gp.rkv->window = 8;
  gp.rkv->learned = coef;
  gp.rkv->learned_dim = E;
  const uint32_t first = static_cast<uint32_t>(kPrompt.size());
  auto candidates = [&](uint32_t l, uint32_t h) {
    const model::KvHeadView v = cache.view(l, h);
    return std::vector<uint32_t>(std::lower_bound(v.positions, v.positions + v.len, first),
                                 v.positions + v.len);
  };
  std::vector<std::vector<uint32_t>> prev(size_t(L) * H);
  uint32_t checked = 0, not_recency = 0;
  const model::GenerateResult r = generate(fwd, cache, kPrompt, gp, [&](int32_t) {
    for (uint32_t l = 0; l < L; ++l)
      for (uint32_t h = 0; h < H; ++h) {
        std::vector<uint32_t> cur = candidates(l, h), pool = prev[size_t(l) * H + h];
        for (uint32_t p = pool.empty() ? first : pool.back() + 1; !cur.empty() && p <= cur.back();
             ++p)
          pool.push_back(p);
        if (cur.size() < pool.size()) {  // a compression: the rule, from the predictions
          const std::vector<float>& s = predicted[size_t(l) * H + h];
          const uint32_t N = static_cast<uint32_t>(pool.size());
          std::vector<float> scores;
          for (uint32_t j = 0; j + 8 < N; ++j) scores.push_back(s[pool[j]]);
          std::vector<uint32_t> want;
          for (uint32_t j : model::rkv_keep(scores, N, *gp.rkv)) want.push_back(pool[j]);
          REQUIRE(cur == want);
          ++checked;
          // Not recency: a dropped row newer than the oldest kept one.
          for (uint32_t q : pool)
            if (!std::binary_search(cur.begin(), cur.end(), q) && q > cur.front()) {
              ++not_recency;
              break;
            }
        }
        prev[size_t(l) * H + h] = cur;
      }
    return true;
  });
  CHECK(r.tokens.size() == 400);
  CHECK(r.compressions > 10);
  CHECK(checked == uint64_t(r.compressions) * L * H);
  CHECK(not_recency > 0);
  CHECK(max_candidates(cache, first) <= 40 + 16);
  gp.rkv->doc_candidates = true;
  CHECK_THROWS_AS(model::validate(*gp.rkv), Error);
}
