// Offline R-KV (spec/methods.md §4) on a tiny random model against the plain reference of
// tests/support/rkv_reference.h: the candidates are the document's rows, the last α of them the
// probe window; importance from the window's recorded queries over the rows before it, redundancy
// over every document row (the window included), the window scoring +inf. The two terms' own
// checks (tiles, the latest copy spared) are tests/kernels/test_rkv.cc.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.h"
#include "compress/scorer.h"
#include "model/prefill.h"
#include "tests/compress/support.h"
#include "tests/support/random_weights.h"
#include "tests/support/rkv_reference.h"

using namespace kvzip;

namespace {

// Weights seed 61, prefix of 5 tokens, prefill chunks of 13 tokens.
struct Run : test::ScoredDocument {
  explicit Run(uint32_t n_c) : ScoredDocument(n_c, 61, 5, 13) {}
};

}  // namespace

TEST_CASE("R-KV scores equal λ·importance − (1−λ)·redundancy computed plainly", "[compress]") {
  Run r(70);
  compress::ScorerOptions so;  // α = 8, λ = 0.1, T = 0.5, kernel 7
  so.rkv_threshold = 0.3f;     // the tiny model's keys: enough pairs above it to matter
  auto scorer = compress::make_scorer("rkv", so);
  const compress::DocumentScores got = r.score(*scorer);
  const uint32_t D = r.cfg.head_dim, G = r.cfg.group(), a = 8, n = 70 - a;
  const uint32_t N = r.n_p + 70;
  bool any_spared = false;  // some row had a similar key zeroed (the test exercises it)
  for (uint32_t l = 0; l < r.cfg.n_layers; ++l)
    for (uint32_t h = 0; h < r.cfg.n_kv_heads; ++h) {
      const float* k = r.cache.view(l, h).k + size_t(r.n_p) * D;  // the 70 candidates
      const float* q = r.rec.at(l, N - a, h * G);  // the window's queries, (a, Hq, D)
      const std::vector<double> I = test::rkv_importance(q, a, uint64_t(r.cfg.n_heads) * D, G, D,
                                                         1.0 / std::sqrt(double(D)), k, n, 7);
      const std::vector<double> R = test::rkv_redundancy(k, 70, D, 0.3);
      const std::vector<double> unzeroed = test::rkv_redundancy(k, 70, D, 2.0);  // nothing above 2
      for (uint32_t j = 0; j < 70; ++j) any_spared |= std::abs(R[j] - unzeroed[j]) > 1e-4 * R[j];
      for (uint32_t j = 0; j < n; ++j) {
        const double want = 0.1 * I[j] - 0.9 * R[j];
        INFO("layer " << l << " head " << h << " row " << j << ": " << got.at(l, h, j) << " vs "
                      << want);
        CHECK(std::abs(got.at(l, h, j) - want) <= 1e-4 * std::abs(want) + 1e-7);
      }
      for (uint32_t j = n; j < 70; ++j) CHECK(std::isinf(got.at(l, h, j)));
    }
  CHECK(any_spared);
  CHECK(scorer->name() == "rkv");
  CHECK(scorer->params() == compress::MethodParams{{"window", "8"},
                                                   {"lambda", "0.1"},
                                                   {"threshold", "0.3"},
                                                   {"kernel", "7"},
                                                   {"candidates", "document"}});
}

TEST_CASE("R-KV keeps a document no longer than its probe whole", "[compress]") {
  Run r(8);
  auto scorer = compress::make_scorer("rkv", compress::ScorerOptions{});
  const compress::DocumentScores s = r.score(*scorer);
  REQUIRE(s.values.size() == size_t(r.cfg.n_layers) * r.cfg.n_kv_heads * 8);
  for (float x : s.values) CHECK(std::isinf(x));
}

TEST_CASE("R-KV refuses bad options and a prefill it did not observe", "[compress]") {
  auto refused = [](const compress::ScorerOptions& o, const char* what) {
    return test::scorer_refuses("rkv", o, what);
  };
  CHECK_FALSE(refused(compress::ScorerOptions{}, ""));
  compress::ScorerOptions so;
  so.rkv_window = 0;
  CHECK(refused(so, "window"));
  for (float x : {-0.1f, 1.5f, std::nanf("")}) {
    so = {};
    so.rkv_lambda = x;
    CHECK(refused(so, "lambda"));
    so = {};
    so.rkv_threshold = x + 1.0f;  // 0.9 is a valid cosine: refused only for 2.5 and NaN
    CHECK(refused(so, "threshold") == !(x + 1.0f <= 1.0f));
  }
  for (uint32_t k : {0u, 6u}) {
    so = {};
    so.rkv_kernel = k;
    CHECK(refused(so, "kernel"));
  }

  CHECK(Run(30).unobserved_refused("rkv"));
}
