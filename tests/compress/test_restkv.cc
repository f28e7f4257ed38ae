// ReST-KV (spec/methods.md §3) against a plain reference on a tiny random model: every probe
// probability materialised, the EMA, the drift window and smoothing written out, and each key's
// score taken as the norm of the E-sized projected change W_o(o' − ō) with o' recomputed by
// removing the key and renormalising (the independent check of the Gram-matrix shortcut).
// Hand-computed cases pin the EMA, the drift rule and the smoothing; bad options are refused.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "common/error.h"
#include "compress/detail/restkv.h"
#include "compress/scorer.h"
#include "model/prefill.h"
#include "tests/compress/support.h"
#include "tests/support/random_weights.h"

using namespace kvzip;

namespace {

// Weights seed 51, prefix of 4 tokens, prefill chunks of 11 tokens.
struct Run : test::ScoredDocument {
  explicit Run(uint32_t n_c) : ScoredDocument(n_c, 51, 4, 11) {}
};

// The reference for one query head: s over the keys before the window, smoothed.
std::vector<double> reference_head(const Run& r, uint32_t l, uint32_t hq, uint32_t W, double alpha,
                                   uint32_t kmin) {
  const uint32_t D = r.cfg.head_dim, E = r.cfg.d_model, Hq = r.cfg.n_heads;
  const uint32_t N = r.n_p + uint32_t(r.doc.size()), before = N - W;
  const model::KvHeadView v = r.cache.view(l, hq / r.cfg.group());
  std::vector<std::vector<double>> A(W, std::vector<double>(N, 0.0));
  for (uint32_t t = 0; t < W; ++t) {
    const float* q = r.rec.at(l, before + t, hq);
    double mx = -INFINITY, sum = 0;
    for (uint32_t j = 0; j <= before + t; ++j) {
      double dot = 0;
      for (uint32_t d = 0; d < D; ++d) dot += double(q[d]) * v.k[size_t(j) * D + d];
      mx = std::max(mx, A[t][j] = dot / std::sqrt(double(D)));
    }
    for (uint32_t j = 0; j <= before + t; ++j) sum += (A[t][j] = std::exp(A[t][j] - mx));
    for (uint32_t j = 0; j <= before + t; ++j) A[t][j] /= sum;
  }
  std::vector<double> a = A[0];
  for (uint32_t t = 1; t < W; ++t)
    for (uint32_t j = 0; j < N; ++j) a[j] = alpha * A[t][j] + (1 - alpha) * a[j];
  double first = 0, second = 0;
  for (uint32_t t = 0; t < W; ++t) {
    const auto top = std::max_element(A[t].begin(), A[t].begin() + before) - A[t].begin();
    (t < W / 2 ? first : second) += double(top);
  }
  const double delta = W < 2 ? 0.0 : second / (W - W / 2) - first / (W / 2);
  std::vector<double> obar(D, 0.0);
  for (uint32_t j = 0; j < N; ++j)
    for (uint32_t d = 0; d < D; ++d) obar[d] += a[j] * v.v[size_t(j) * D + d];
  std::vector<double> s(before);
  const std::vector<float> wo = to_f32(r.w.layers[l].wo);  // (E, Hq·D)
  for (uint32_t j = 0; j < before; ++j) {
    std::vector<double> o(D, 0.0);  // o' = the output without key j, renormalised
    double mass = 0;
    for (uint32_t i = 0; i < N; ++i) {
      if (i == j) continue;
      mass += a[i];
      for (uint32_t d = 0; d < D; ++d) o[d] += a[i] * v.v[size_t(i) * D + d];
    }
    double n2 = 0;
    for (uint32_t e = 0; e < E; ++e) {
      double y = 0;
      for (uint32_t d = 0; d < D; ++d)
        y += double(wo[size_t(e) * Hq * D + size_t(hq) * D + d]) * (o[d] / mass - obar[d]);
      n2 += y * y;
    }
    s[j] = std::sqrt(n2);
  }
  const int64_t k = std::max<int64_t>(kmin, 2 * int64_t(std::floor(std::abs(delta) / 2000)) + 1);
  const int64_t shift = int64_t(std::floor(delta / 2000)) + (delta <= 0 ? 1 : 0);
  std::vector<double> out(before);
  for (int64_t j = 0; j < int64_t(before); ++j) {
    double sum = 0;
    for (int64_t i = j + shift - k / 2; i <= j + shift + k / 2; ++i)
      sum += s[size_t(std::clamp<int64_t>(i, 0, before - 1))];
    out[size_t(j)] = sum / double(k);
  }
  return out;
}

void check_against_reference(Run& r, const compress::ScorerOptions& so) {
  auto scorer = compress::make_scorer("rest-kv", so);
  const compress::DocumentScores got = r.score(*scorer);
  const uint32_t n_c = uint32_t(r.doc.size()), W = std::min(so.restkv_window, n_c);
  const uint32_t before_doc = n_c - W, G = r.cfg.group();
  for (uint32_t l = 0; l < r.cfg.n_layers; ++l)
    for (uint32_t h = 0; h < r.cfg.n_kv_heads; ++h) {
      std::vector<double> want(before_doc, -INFINITY);
      for (uint32_t g = 0; g < G; ++g) {
        const std::vector<double> s =
            reference_head(r, l, h * G + g, W, so.restkv_alpha, so.restkv_kmin);
        for (uint32_t j = 0; j < before_doc; ++j) want[j] = std::max(want[j], s[r.n_p + j]);
      }
      const double scale = *std::max_element(want.begin(), want.end());
      REQUIRE(scale > 0);
      for (uint32_t j = 0; j < n_c; ++j) {
        INFO("layer " << l << " head " << h << " row " << j);
        if (j >= before_doc) {
          CHECK(std::isinf(got.at(l, h, j)));
        } else {
          CHECK(std::abs(got.at(l, h, j) - want[j]) <= 1e-4 * std::abs(want[j]) + 1e-6 * scale);
        }
      }
    }
}

}  // namespace

TEST_CASE("ReST-KV scores equal the plain reference of the output change when a key is removed",
          "[compress]") {
  Run r(262);  // 258 candidates before the window: the norms span two 256-row tiles
  compress::ScorerOptions so;
  so.restkv_window = 8;
  check_against_reference(r, so);
}

TEST_CASE("ReST-KV with its defaults, a short document and a wider k_min matches the reference",
          "[compress]") {
  Run r(45);
  compress::ScorerOptions so;  // W = 32, alpha 0.3
  so.restkv_kmin = 7;
  so.restkv_alpha = 0.6f;
  check_against_reference(r, so);
  auto scorer = compress::make_scorer("rest-kv", so);
  CHECK(scorer->name() == "rest-kv");
  CHECK(scorer->params() ==
        compress::MethodParams{{"window", "32"}, {"alpha", "0.6"}, {"kmin", "7"}, {"gqa", "max"}});
}

TEST_CASE("ReST-KV keeps a document no longer than its window whole", "[compress]") {
  Run r(20);
  auto scorer = compress::make_scorer("rest-kv", compress::ScorerOptions{});
  const compress::DocumentScores s = r.score(*scorer);
  REQUIRE(s.values.size() == size_t(r.cfg.n_layers) * r.cfg.n_kv_heads * 20);
  for (float x : s.values) CHECK(std::isinf(x));
}

TEST_CASE("ReST-KV's EMA weights later probe rows by alpha, earlier ones geometrically",
          "[compress]") {
  // Rows (3, 2): c = [1, 0] → 0.3·[0, 1] + 0.7·c = [0.7, 0.3] → [0.49, 0.51]. A plain mean would
  // give [1/3, 2/3], the last row alone [0, 1].
  const float rows[] = {1, 0, 0, 1, 0, 1};
  float out[2];
  compress::detail::restkv_ema(rows, 3, 2, 0.3f, out);
  CHECK(out[0] == Approx(0.49).epsilon(1e-6));
  CHECK(out[1] == Approx(0.51).epsilon(1e-6));
  compress::detail::restkv_ema(rows, 1, 2, 0.3f, out);  // one row: itself
  CHECK(out[0] == 1.0f);
  CHECK(out[1] == 0.0f);
}

TEST_CASE("ReST-KV's smoothing window follows the attention drift as methods §3 writes it",
          "[compress]") {
  using compress::detail::restkv_drift_window;
  auto kw = [](double delta, uint32_t kmin) {
    const compress::detail::DriftWindow w = restkv_drift_window(delta, kmin);
    return std::pair<uint32_t, int64_t>{w.k, w.shift};
  };
  CHECK(kw(0.0, 5) == std::pair<uint32_t, int64_t>{5, 1});  // Δ <= 0: +1
  CHECK(kw(1999.0, 5) == std::pair<uint32_t, int64_t>{5, 0});
  CHECK(kw(-1999.0, 5) == std::pair<uint32_t, int64_t>{5, 0});  // ⌊−0.9995⌋ + 1
  CHECK(kw(-2000.0, 5) == std::pair<uint32_t, int64_t>{5, 0});  // ⌊−1⌋ + 1
  CHECK(kw(4500.0, 5) == std::pair<uint32_t, int64_t>{5, 2});   // 2·2 + 1 = 5 = k_min
  CHECK(kw(-4500.0, 5) == std::pair<uint32_t, int64_t>{5, -2});
  CHECK(kw(10000.0, 5) == std::pair<uint32_t, int64_t>{11, 5});
  CHECK(kw(-10000.0, 5) == std::pair<uint32_t, int64_t>{11, -4});
  CHECK(kw(100.0, 1) == std::pair<uint32_t, int64_t>{1, 0});
}

TEST_CASE("ReST-KV's smoothing averages a shifted window and repeats the edges", "[compress]") {
  auto smooth = [](std::vector<float> s, uint32_t k, int64_t shift) {
    std::vector<float> out(s.size());
    compress::detail::restkv_smooth(s, compress::detail::DriftWindow{k, shift}, out);
    return out;
  };
  const float t = 10.0f / 3;
  CHECK(smooth({0, 0, 0, 10, 0, 0, 0}, 3, 0) == std::vector<float>{0, 0, t, t, t, 0, 0});
  CHECK(smooth({0, 0, 0, 10, 0, 0, 0}, 3, 1) == std::vector<float>{0, t, t, t, 0, 0, 0});
  CHECK(smooth({3, 0, 0, 0}, 3, 0) == std::vector<float>{2, 1, 0, 0});  // s[-1] = s[0]
  CHECK(smooth({0, 0, 0, 6}, 3, 1) == std::vector<float>{0, 2, 4, 6});  // s[4], s[5] = s[3]
  CHECK(smooth({0, 0, 0, 6}, 3, -1) == std::vector<float>{0, 0, 0, 2});
  CHECK(smooth({5, 1, 9}, 1, 0) == std::vector<float>{5, 1, 9});  // k = 1: the identity
}

TEST_CASE("ReST-KV refuses bad options and a prefill it did not observe", "[compress]") {
  compress::ScorerOptions so;
  CHECK_NOTHROW(compress::make_scorer("rest-kv", so));
  auto refused = [](const compress::ScorerOptions& o, const char* what) {
    return test::scorer_refuses("rest-kv", o, what);
  };
  so.restkv_window = 0;
  CHECK(refused(so, "window"));
  so = {};
  for (float a : {0.0f, -0.5f, 1.5f, std::numeric_limits<float>::quiet_NaN()}) {
    so.restkv_alpha = a;
    CHECK(refused(so, "alpha"));
  }
  so = {};
  for (uint32_t k : {0u, 4u}) {
    so.restkv_kmin = k;
    CHECK(refused(so, "k_min"));
  }

  CHECK(Run(40).unobserved_refused("rest-kv"));
}

TEST_CASE("window-query scorers refuse observations that do not continue the document prefill",
          "[compress]") {
  using Catch::Matchers::Contains;
  const ModelConfig cfg = test::tiny_qwen2_config();
  const model::Weights w = test::random_weights(cfg, 5);
  model::Forward fwd(w);
  for (const char* method : {"rest-kv", "rkv", "snapkv"}) {
    INFO(method);
    auto scorer = compress::make_scorer(method, compress::ScorerOptions{});
    model::AttentionObserver* obs = scorer->prefill_observer(fwd, 2, 40);
    REQUIRE(obs);
    std::vector<float> q(size_t(cfg.n_heads) * cfg.head_dim, 0.0f);
    const uint32_t at5 = 5;  // the prefill starts at position 0, not 5
    model::AttentionObservation o;
    o.layer = 0;
    o.q = q.data();
    o.positions = &at5;
    o.T = 1;
    o.Hq = cfg.n_heads;
    o.Hkv = cfg.n_kv_heads;
    o.D = cfg.head_dim;
    o.scale = 0.125f;
    CHECK_THROWS_WITH(obs->on_attention(o), Contains("expected tokens from position 0") &&
                                                Contains("attach the observer"));
  }
}
