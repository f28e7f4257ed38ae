// The ReST-KV scorer (spec/methods.md §3), offline: the probe is the document's last W tokens.
// Per layer and query head hq (KV head h = hq / G), over all N = n_p + n_c keys:
//   A (W, N)  softmax of the probe's queries, causal inside the window;
//   ā = EMA over A's rows in order (α); ō = Σ_j ā_j v_j;
//   s_j = ā_j/(1−ā_j)·‖W_o,hq(ō − v_j)‖₂ = the change of the head's projected output when key j is
//         removed and the rest renormalised; ‖W_o x‖² = xᵀ(W_oᵀW_o)x with the D×D Gram of head
//         hq's column block of wo (E, Hq·D), so no E-sized vector is formed; ā_j >= 1 gives +inf;
//   smoothing: drift Δ = mean argmax key of the probe's second half − first half's, the argmax
//         taken per query row over the candidates [0, N−W) (prefix + document before the window);
//         s averaged over restkv_drift_window(Δ, k_min) along the candidate axis, edges repeated.
// GQA: KV head h's score is the MAX over its G query heads' smoothed s: a pair is evicted from all
// G heads at once, and the max keeps it when any one head's output depends on it (as KVzip's
// max over the group). The window's own rows score +inf; the prefix is never scored.
// Cost per (layer, query head): O(W·N·D) probe + O(N·D²) norms + O(E·D²) Gram; memory O(W·N).
// The probe and the output change are kernels (kernels/restkv.h); the smoothing is here.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "common/error.h"
#include "compress/detail/restkv.h"
#include "compress/detail/scorers.h"
#include "compress/detail/window_queries.h"
#include "kernels/restkv.h"
#include "kernels/thread_pool.h"

namespace kvzip::compress::detail {

void restkv_ema(const float* rows, uint32_t W, uint32_t n, float alpha, float* out) {
  std::copy(rows, rows + n, out);
  for (uint32_t t = 1; t < W; ++t) {
    const float* r = rows + size_t(t) * n;
    for (uint32_t j = 0; j < n; ++j) out[j] = alpha * r[j] + (1.0f - alpha) * out[j];
  }
}

DriftWindow restkv_drift_window(double delta, uint32_t kmin) {
  constexpr double kScale = 2000.0;
  DriftWindow w;
  const auto wide = static_cast<uint64_t>(std::floor(std::abs(delta) / kScale));
  w.k = static_cast<uint32_t>(std::max<uint64_t>(kmin, 2 * wide + 1));
  w.shift = static_cast<int64_t>(std::floor(delta / kScale)) + (delta <= 0.0 ? 1 : 0);
  return w;
}

void restkv_smooth(std::span<const float> s, DriftWindow w, std::span<float> out) {
  const int64_t n = static_cast<int64_t>(s.size()), half = w.k / 2;
  for (int64_t j = 0; j < n; ++j) {
    double sum = 0.0;
    for (int64_t i = j + w.shift - half; i <= j + w.shift + half; ++i)
      sum += s[static_cast<size_t>(std::clamp<int64_t>(i, 0, n - 1))];
    out[static_cast<size_t>(j)] = static_cast<float>(sum / w.k);
  }
}

namespace {

constexpr float kAlwaysKeep = std::numeric_limits<float>::infinity();

// Everything one (layer, KV head) unit reads.
struct HeadInput {
  const float* q = nullptr;   // (w, Hq, D) the probe's queries of this layer
  const float* k = nullptr;   // (N, D)
  const float* v = nullptr;   // (N, D)
  const float* wo = nullptr;  // (E, Hq·D)
  uint32_t N = 0, w = 0, Hq = 0, D = 0, E = 0;
  float scale = 0.0f;
};

// Per-thread buffers of one unit.
struct Scratch {
  std::vector<float> probs, abar, s, smooth;
};

// Δ: mean argmax candidate of the second half of the rows minus the first half's (0 for w < 2).
double drift(const std::vector<float>& p, uint32_t w, uint32_t N, uint32_t before) {
  const uint32_t half = w / 2;
  if (half == 0) return 0.0;
  double first = 0.0, second = 0.0;
  for (uint32_t t = 0; t < w; ++t) {
    const float* row = p.data() + size_t(t) * N;
    const double top = double(std::max_element(row, row + before) - row);
    (t < half ? first : second) += top;
  }
  return second / (w - half) - first / half;
}

class RestKvScorer final : public WindowScorer {
 public:
  RestKvScorer(uint32_t window, float alpha, uint32_t kmin)
      : WindowScorer(window), alpha_(alpha), kmin_(kmin) {}
  std::string name() const override { return "rest-kv"; }
  MethodParams params() const override {
    char alpha[32];
    std::snprintf(alpha, sizeof alpha, "%g", double(alpha_));
    return {{"window", std::to_string(window_)},
            {"alpha", alpha},
            {"kmin", std::to_string(kmin_)},
            {"gqa", "max"}};
  }

  DocumentScores score(const ScoreInput& in) override {
    const WindowQueries& rec = observed(in, "rest-kv");
    DocumentScores s = make_scores(in, kAlwaysKeep);
    const ModelConfig& c = in.forward->config();
    const uint32_t n_p = s.n_prefix, N = n_p + s.n_doc, w = rec.window();
    const uint32_t before = N - w, Hkv = c.n_kv_heads, G = c.group();
    if (before <= n_p) return s;  // the whole document is the probe window
    const model::Weights& weights = in.forward->weights();
    // One layer at a time: W_o is dequantized to fp32 for that layer only (E·Hq·D floats), so the
    // model's weights are never expanded as a whole.
    std::vector<float> wo;  // (E, Hq·D)
    for (uint32_t l = 0; l < c.n_layers; ++l) {
      if (c.is_local(l)) continue;  // not scored: selection keeps a local layer's reachable rows
      wo.resize(size_t(weights.layers[l].wo.rows) * weights.layers[l].wo.cols);
      dequantize_rows(weights.layers[l].wo, 0, weights.layers[l].wo.rows, wo.data());
      auto unit = [&](size_t u) {
        thread_local Scratch sc;
        const uint32_t h = static_cast<uint32_t>(u);
        const model::KvHeadView view = in.cache->view(l, h);
        const HeadInput hi{rec.layer_queries(l),
                           view.k,
                           view.v,
                           wo.data(),
                           N,
                           w,
                           c.n_heads,
                           c.head_dim,
                           c.d_model,
                           1.0f / std::sqrt(static_cast<float>(c.head_dim))};
        float* out = s.values.data() + (size_t(l) * Hkv + h) * s.n_doc;
        std::fill(out, out + (before - n_p), -kAlwaysKeep);
        for (uint32_t g = 0; g < G; ++g) score_query_head(hi, h * G + g, before, n_p, sc, out);
      };
      run_units(in.forward->pool(), Hkv, unit);
    }
    return s;
  }

 private:
  // out[j - n_p] = max(out[j - n_p], smoothed s_j) for the document candidates n_p <= j < before.
  void score_query_head(const HeadInput& in, uint32_t hq, uint32_t before, uint32_t n_p,
                        Scratch& sc, float* out) const {
    const uint32_t N = in.N, D = in.D;
    sc.probs.resize(size_t(in.w) * N);
    restkv_probe(kernels::Exec{},
                 kernels::RestKvProbeArgs{in.q + size_t(hq) * D, uint64_t(in.Hq) * D, in.w, in.k, N,
                                          D, in.scale, sc.probs.data()});
    sc.abar.resize(N);
    restkv_ema(sc.probs.data(), in.w, N, alpha_, sc.abar.data());
    const DriftWindow win = restkv_drift_window(drift(sc.probs, in.w, N, before), kmin_);
    sc.s.resize(before);
    // W_o's (E, D) column block of head hq: rows Hq·D apart.
    const kernels::RestKvOutputChangeArgs oc{.abar = sc.abar.data(),
                                             .v = in.v,
                                             .N = N,
                                             .D = D,
                                             .n = before,
                                             .wo = in.wo + size_t(hq) * D,
                                             .wo_stride = uint64_t(in.Hq) * D,
                                             .E = in.E,
                                             .out = sc.s.data()};
    restkv_output_change(kernels::Exec{}, oc);
    sc.smooth.resize(before);
    restkv_smooth(sc.s, win, sc.smooth);
    for (uint32_t j = n_p; j < before; ++j) out[j - n_p] = std::max(out[j - n_p], sc.smooth[j]);
  }

  float alpha_;
  uint32_t kmin_;
};

}  // namespace

std::unique_ptr<Scorer> make_restkv_scorer(const ScorerOptions& o) {
  require_positive("rest-kv window", o.restkv_window, 32);
  if (!(o.restkv_alpha > 0.0f && o.restkv_alpha <= 1.0f))
    throw Error(Errc::invalid_argument, "rest-kv EMA alpha is " + std::to_string(o.restkv_alpha) +
                                            ", expected 0 < alpha <= 1 (default 0.3)");
  require_odd("rest-kv smoothing k_min", o.restkv_kmin, 5);
  return std::make_unique<RestKvScorer>(o.restkv_window, o.restkv_alpha, o.restkv_kmin);
}

}  // namespace kvzip::compress::detail
