// The baseline scorers against plain references: SnapKV (window probabilities summed, max-pooled)
// and H2O (attention accumulated over the prefill) recomputed from recorded queries and the cached
// keys; streaming keeps sinks + the most recent rows; random is a pure function of its seed; full
// never evicts.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "compress/selection.h"
#include "model/prefill.h"
#include "tests/compress/support.h"
#include "tests/support/random_weights.h"

using namespace kvzip;

namespace {

constexpr uint32_t kNp = 4, kNc = 30;

struct Observed {
  ModelConfig cfg = test::tiny_qwen2_config();  // G = 3
  model::Weights w = test::random_weights(cfg, 31);
  std::vector<int32_t> prefix = test::random_tokens(kNp, cfg.vocab_size, 32);
  std::vector<int32_t> doc = test::random_tokens(kNc, cfg.vocab_size, 33);
  test::QueryRecorder rec;

  // Prefills with the scorer's observer on a tracing forward; returns the scores.
  compress::DocumentScores run(compress::Scorer& scorer, model::KvCache* keep_cache = nullptr) {
    rec.Hq = cfg.n_heads;
    rec.D = cfg.head_dim;
    rec.clear(0);
    model::Forward fwd(w, model::ForwardOptions{2, 8, rec.trace_fn()});
    prefill::PrefillOptions po;
    po.chunk = 11;
    po.observer = scorer.prefill_observer(fwd, kNp, kNc);
    prefill::PrefillResult pre = prefill::prefill_document(fwd, prefix, doc, po);
    compress::DocumentScores s = scorer.score(compress::ScoreInput{&fwd, &pre.cache, kNp, doc});
    if (keep_cache) *keep_cache = pre.cache;
    return s;
  }

  // acc[l][h][key] = Σ over queries i >= first (and the GQA group) of softmax_i(key), plainly.
  std::vector<double> accumulate(const model::KvCache& cache, uint32_t first) const {
    const uint32_t L = cfg.n_layers, Hkv = cfg.n_kv_heads, G = cfg.group(), D = cfg.head_dim;
    const uint32_t total = kNp + kNc;
    std::vector<double> acc(size_t(L) * Hkv * total, 0.0);
    for (uint32_t l = 0; l < L; ++l)
      for (uint32_t h = 0; h < Hkv; ++h) {
        const model::KvHeadView v = cache.view(l, h);
        for (uint32_t i = first; i < total; ++i)
          for (uint32_t g = 0; g < G; ++g) {
            const float* q = rec.at(l, i, h * G + g);
            std::vector<double> p(i + 1);
            double mx = -INFINITY, sum = 0;
            for (uint32_t j = 0; j <= i; ++j) {
              double s = 0;
              for (uint32_t d = 0; d < D; ++d) s += double(q[d]) * v.k[size_t(j) * D + d];
              mx = std::max(mx, p[j] = s / std::sqrt(double(D)));
            }
            for (double& x : p) sum += (x = std::exp(x - mx));
            for (uint32_t j = 0; j <= i; ++j) acc[(size_t(l) * Hkv + h) * total + j] += p[j] / sum;
          }
      }
    return acc;
  }
};

void check_close(const compress::DocumentScores& got, const std::vector<double>& want) {
  REQUIRE(got.values.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("score " << i);
    if (std::isinf(want[i])) {
      REQUIRE(std::isinf(got.values[i]));
    } else {
      REQUIRE(std::abs(got.values[i] - want[i]) <= 1e-5 * std::max(1.0, std::abs(want[i])));
    }
  }
}

}  // namespace

TEST_CASE("SnapKV sums the window's probabilities and max-pools them with kernel 7", "[compress]") {
  Observed o;
  compress::ScorerOptions so;
  so.snapkv_window = 5;
  so.snapkv_kernel = 7;
  auto scorer = compress::make_scorer("snapkv", so);
  model::KvCache cache(o.cfg);
  compress::DocumentScores got = o.run(*scorer, &cache);

  const uint32_t total = kNp + kNc, before = total - 5, Hkv = o.cfg.n_kv_heads;
  std::vector<double> acc = o.accumulate(cache, before);
  std::vector<double> want(size_t(o.cfg.n_layers) * Hkv * kNc, INFINITY);  // window: kept
  for (uint32_t lh = 0; lh < o.cfg.n_layers * Hkv; ++lh)
    for (uint32_t j = 0; j + 5 < kNc; ++j) {
      const int c = int(kNp + j);
      double m = -1;
      for (int x = c - 3; x <= c + 3; ++x)
        if (x >= 0 && x < int(before)) m = std::max(m, acc[size_t(lh) * total + x]);
      want[size_t(lh) * kNc + j] = m;
    }
  check_close(got, want);
  CHECK(scorer->name() == "snapkv");
  CHECK(scorer->params() ==
        compress::MethodParams{{"window", "5"}, {"kernel", "7"}, {"pooling", "max"}});
}

TEST_CASE("H2O accumulates the attention every key receives during the prefill", "[compress]") {
  Observed o;
  compress::ScorerOptions so;
  so.h2o_recent = 3;
  auto scorer = compress::make_scorer("h2o", so);
  model::KvCache cache(o.cfg);
  compress::DocumentScores got = o.run(*scorer, &cache);

  const uint32_t total = kNp + kNc, Hkv = o.cfg.n_kv_heads;
  std::vector<double> acc = o.accumulate(cache, 0);
  std::vector<double> want(size_t(o.cfg.n_layers) * Hkv * kNc, INFINITY);  // recent: kept
  for (uint32_t lh = 0; lh < o.cfg.n_layers * Hkv; ++lh)
    for (uint32_t j = 0; j + 3 < kNc; ++j)
      want[size_t(lh) * kNc + j] = acc[size_t(lh) * total + kNp + j];
  check_close(got, want);
  // Every query's probabilities sum to one: the accumulated mass over all keys counts the queries.
  double mass = 0;
  for (uint32_t j = 0; j < total; ++j) mass += acc[j];
  CHECK(mass == Approx(double(total) * o.cfg.group()).epsilon(1e-9));
}

TEST_CASE("observing scorers refuse to score a prefill they did not observe", "[compress]") {
  Observed o;
  for (const char* m : {"snapkv", "h2o"}) {
    auto scorer = compress::make_scorer(m, compress::ScorerOptions{});
    model::Forward fwd(o.w, model::ForwardOptions{1, 16, {}});
    prefill::PrefillResult pre = prefill::prefill_document(fwd, o.prefix, o.doc);
    INFO(m);
    CHECK_THROWS_AS(scorer->score(compress::ScoreInput{&fwd, &pre.cache, kNp, o.doc}), Error);
  }
}

TEST_CASE("streaming keeps the sink tokens and the most recent rows", "[compress]") {
  Observed o;
  compress::ScorerOptions so;
  so.sink = 4;
  auto scorer = compress::make_scorer("streaming", so);
  model::Forward fwd(o.w, model::ForwardOptions{1, 64, {}});
  prefill::PrefillResult pre = prefill::prefill_document(fwd, o.prefix, o.doc);
  compress::DocumentScores s = scorer->score(compress::ScoreInput{&fwd, &pre.cache, kNp, o.doc});
  for (compress::SelectionLevel level :
       {compress::SelectionLevel::PerHead, compress::SelectionLevel::Global}) {
    compress::Selection sel =
        compress::select_rows(s, 0.4, level);  // 12 of 30 per head (global: same everywhere)
    std::vector<uint32_t> want = {0, 1, 2, 3, 4, 5, 6, 7};  // prefix + 4 sinks
    for (uint32_t j = kNc - 8; j < kNc; ++j) want.push_back(kNp + j);
    for (const auto& rows : sel.keep) CHECK(rows == want);
  }
}

TEST_CASE("random scores are a pure function of the seed", "[compress]") {
  Observed o;
  model::Forward fwd(o.w, model::ForwardOptions{1, 64, {}});
  prefill::PrefillResult pre = prefill::prefill_document(fwd, o.prefix, o.doc);
  auto scores = [&](uint64_t seed) {
    compress::ScorerOptions so;
    so.seed = seed;
    return compress::make_scorer("random", so)
        ->score(compress::ScoreInput{&fwd, &pre.cache, kNp, o.doc})
        .values;
  };
  const std::vector<float> a = scores(7), b = scores(7), c = scores(8);
  CHECK(a == b);
  CHECK(a != c);
  CHECK(*std::min_element(a.begin(), a.end()) >= 0.0f);
  CHECK(*std::max_element(a.begin(), a.end()) < 1.0f);
  // Distinct enough that selection is not decided by ties.
  std::vector<float> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  CHECK(std::unique(sorted.begin(), sorted.end()) == sorted.end());
}
