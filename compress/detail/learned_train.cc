// Training the learned scorer (compress/learned_scorer.h; spec/methods.md §1 step 10). Each
// calibration window is its own document: prefilled with an observer that keeps every layer's
// input-normed hidden state of the window's tokens (the features), then reconstructed as ONE
// KVzip chunk with an observer that forms each query head's softmax itself (one sgemm per head
// and forward chunk), so that both targets come from the same pass: KVzip's max probability, and
// KVzip+'s max of probability / ‖x_j‖ (x_j the query's residual input of the layer) times
// ‖W_o,h v_i‖ (through the D×D Gram matrix of the head's block of W_o). With the window as one
// chunk the local softmax of methods §1 step 5 is the ordinary causal one. Both targets are
// fitted together (they share XᵀX); the held-out windows run after the solve.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "compress/learned_scorer.h"
#include "kernels/thread_pool.h"
#include "model/prefill.h"

namespace kvzip::compress {
namespace {

// Scores below this are logged as it: a probability that underflowed would give -inf.
constexpr float kScoreFloor = 1e-12f;

// Copies the input-normed hidden state of every window token (positions >= n_p) per layer.
class FeatureObserver final : public model::AttentionObserver {
 public:
  FeatureObserver(std::vector<float>& x, uint32_t n_p, uint32_t n, uint32_t E)
      : x_(x), n_p_(n_p), n_(n), E_(E) {}
  void on_attention(const model::AttentionObservation& obs) override {
    KVZIP_ASSERT(obs.x_norm && obs.E == E_);
    for (uint32_t t = 0; t < obs.T; ++t) {
      if (obs.positions[t] < n_p_) continue;
      const size_t j = obs.positions[t] - n_p_;
      std::copy_n(obs.x_norm + size_t(t) * E_, E_, x_.data() + (size_t(obs.layer) * n_ + j) * E_);
    }
  }

 private:
  std::vector<float>& x_;
  uint32_t n_p_, n_, E_;
};

// During the reconstruction of the window: per layer and query head, the max over the
// reconstruction's queries of each window key's probability, plain and divided by ‖x_j‖.
class TargetObserver final : public model::AttentionObserver {
 public:
  TargetObserver(const ModelConfig& c, uint32_t n_p, uint32_t n, kernels::ThreadPool& pool)
      : c_(c),
        n_p_(n_p),
        n_(n),
        pool_(pool),
        raw_(size_t(c.n_layers) * c.n_heads * n, 0.0f),
        plus_(raw_.size(), 0.0f) {}
  const float* raw(uint32_t l, uint32_t hq) const {
    return raw_.data() + (size_t(l) * c_.n_heads + hq) * n_;
  }
  const float* plus(uint32_t l, uint32_t hq) const {
    return plus_.data() + (size_t(l) * c_.n_heads + hq) * n_;
  }

  void on_attention(const model::AttentionObservation& obs) override {
    if (c_.is_local(obs.layer)) return;  // KVzip does not score sliding-window layers
    const uint32_t T = obs.T, Hq = obs.Hq, D = obs.D, G = Hq / obs.Hkv;
    const uint32_t len = obs.cache->view(obs.layer, 0).len;
    std::vector<float> inv_norm(T);
    for (uint32_t t = 0; t < T; ++t) {
      const float* x = obs.x + size_t(t) * obs.E;
      double s = 0;
      for (uint32_t e = 0; e < obs.E; ++e) s += double(x[e]) * x[e];
      inv_norm[t] = s > 0 ? float(1.0 / std::sqrt(s)) : 0.0f;
    }
    logits_.resize(size_t(Hq) * T * len);
    for (uint32_t hq = 0; hq < Hq; ++hq) {
      const model::KvHeadView v = obs.cache->view(obs.layer, hq / G);
      KVZIP_ASSERT(v.len == len && !v.k_tail);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(T), int(len), int(D), obs.scale,
                  obs.q + size_t(hq) * D, int(Hq * D), v.k, int(D), 0.0f,
                  logits_.data() + size_t(hq) * T * len, int(len));
    }
    pool_.run(Hq, [&](size_t hq) { head(obs.layer, uint32_t(hq), T, len, inv_norm.data()); });
  }

 private:
  void head(uint32_t l, uint32_t hq, uint32_t T, uint32_t len, const float* inv_norm) {
    float* raw = raw_.data() + (size_t(l) * c_.n_heads + hq) * n_;
    float* plus = plus_.data() + (size_t(l) * c_.n_heads + hq) * n_;
    for (uint32_t t = 0; t < T; ++t) {
      float* z = logits_.data() + (size_t(hq) * T + t) * len;
      const uint32_t keys = len - T + t + 1;  // causal: every row up to the query's own
      float m = -std::numeric_limits<float>::infinity();
      for (uint32_t i = 0; i < keys; ++i) m = std::max(m, z[i]);
      double sum = 0;
      for (uint32_t i = 0; i < keys; ++i) {
        z[i] = std::exp(z[i] - m);
        sum += z[i];
      }
      const float inv = float(1.0 / sum);
      for (uint32_t i = 0; i < n_; ++i) {
        const float p = z[n_p_ + i] * inv;
        raw[i] = std::max(raw[i], p);
        plus[i] = std::max(plus[i], p * inv_norm[t]);
      }
    }
  }

  const ModelConfig& c_;
  uint32_t n_p_, n_;
  kernels::ThreadPool& pool_;
  std::vector<float> raw_, plus_;  // (L, Hq, n)
  std::vector<float> logits_;      // (Hq, T, len) of the current layer and forward chunk
};

// ‖W_o,h v_i‖ of every window row i of every query head of layer l: (Hq, n).
std::vector<float> projected_value_norms(const model::Weights& w, const model::KvCache& cache,
                                         uint32_t l, uint32_t n_p, uint32_t n) {
  const ModelConfig& c = w.config;
  const uint32_t E = c.d_model, D = c.head_dim, Hq = c.n_heads, G = c.group();
  std::vector<float> wo(size_t(E) * Hq * D), gram(size_t(D) * D), gv(size_t(n) * D);
  model::dequantize_rows(w.layers[l].wo, 0, E, wo.data());
  std::vector<float> out(size_t(Hq) * n);
  for (uint32_t hq = 0; hq < Hq; ++hq) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(D), int(D), int(E), 1.0f,
                wo.data() + size_t(hq) * D, int(Hq * D), wo.data() + size_t(hq) * D, int(Hq * D),
                0.0f, gram.data(), int(D));
    const float* v = cache.view(l, hq / G).v + size_t(n_p) * D;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(n), int(D), int(D), 1.0f, v, int(D),
                gram.data(), int(D), 0.0f, gv.data(), int(D));
    for (uint32_t i = 0; i < n; ++i) {
      double s = 0;
      for (uint32_t d = 0; d < D; ++d) s += double(gv[size_t(i) * D + d]) * v[size_t(i) * D + d];
      out[size_t(hq) * n + i] = float(std::sqrt(std::max(s, 0.0)));
    }
  }
  return out;
}

float log_score(float s) { return std::log(std::max(s, kScoreFloor)); }

}  // namespace

std::vector<std::span<const int32_t>> calibration_windows(std::span<const int32_t> tokens,
                                                          uint32_t window) {
  if (window == 0)
    throw Error(Errc::invalid_argument, "calibrate: the window must be at least 1 token");
  std::vector<std::span<const int32_t>> out;
  for (size_t b = 0; b < tokens.size(); b += window) {
    const size_t e = std::min(tokens.size(), b + window);
    if (!out.empty() && e - b < window / 4) {  // too short alone: extend the previous window
      out.back() = tokens.subspan(b - out.back().size(), out.back().size() + (e - b));
    } else {
      out.push_back(tokens.subspan(b, e - b));
    }
  }
  return out;
}

WindowTargets window_targets(model::Forward& forward, std::span<const int32_t> prefix,
                             std::span<const int32_t> window, const ScorerOptions& options) {
  const ModelConfig& c = forward.config();
  const uint32_t L = c.n_layers, E = c.d_model, Hkv = c.n_kv_heads, G = c.group();
  const uint32_t n_p = uint32_t(prefix.size()), n = uint32_t(window.size());
  WindowTargets out;
  out.n = n;
  out.x.assign(size_t(L) * n * E, 0.0f);
  out.y.assign(size_t(L) * n * 2 * Hkv, 0.0f);
  FeatureObserver features(out.x, n_p, n, E);
  const std::vector<int32_t> r = reconstruction_input(options.prompts, window, 0, n, 0);
  prefill::PrefillOptions po;
  po.observer = &features;
  po.answer_room = 0;
  po.scoring_room = uint32_t(r.size());
  po.attention_bf16 = false;  // the targets and features of the fp32 forward
  prefill::PrefillResult pre = prefill::prefill_document(forward, prefix, window, po);

  TargetObserver targets(c, n_p, n, forward.pool());
  const uint32_t full = n_p + n;
  forward.prefill(pre.cache, r, model::LogitsMode::None, &targets);
  pre.cache.rollback(full);
  for (uint32_t l = 0; l < L; ++l) {
    if (c.is_local(l)) continue;
    const std::vector<float> vnorm = projected_value_norms(forward.weights(), pre.cache, l, n_p, n);
    for (uint32_t h = 0; h < Hkv; ++h)
      for (uint32_t i = 0; i < n; ++i) {
        float raw = 0.0f, plus = 0.0f;
        for (uint32_t g = 0; g < G; ++g) {
          const uint32_t hq = h * G + g;
          raw = std::max(raw, targets.raw(l, hq)[i]);
          plus = std::max(plus, targets.plus(l, hq)[i] * vnorm[size_t(hq) * n + i]);
        }
        float* y = out.y.data() + (size_t(l) * n + i) * 2 * Hkv;
        y[h] = log_score(raw);
        y[Hkv + h] = log_score(plus);
      }
  }
  return out;
}

namespace {

// Held-out predictions and targets of one KV head of one layer and target, gathered over the
// held-out windows.
struct Heldout {
  std::vector<float> target, predicted;
};

format::ScorerFile as_file(const ModelConfig& c, const std::vector<std::vector<double>>& coef,
                           uint32_t which, double alpha) {
  format::ScorerFile f;
  f.n_layers = c.n_layers;
  f.n_kv_heads = c.n_kv_heads;
  f.d_model = c.d_model;
  f.alpha = alpha;
  f.target = which == 0 ? format::ScorerTarget::Kvzip : format::ScorerTarget::KvzipPlus;
  const size_t d1 = size_t(c.d_model) + 1;
  f.weights.assign(size_t(c.n_layers) * c.n_kv_heads * d1, 0.0f);
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    if (coef[l].empty()) continue;  // an unscored layer predicts 0
    for (uint32_t h = 0; h < c.n_kv_heads; ++h)
      for (size_t e = 0; e < d1; ++e)
        f.weights[(size_t(l) * c.n_kv_heads + h) * d1 + e] =
            float(coef[l][(size_t(which) * c.n_kv_heads + h) * d1 + e]);
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  f.r2.assign(c.n_layers, nan);
  f.spearman.assign(c.n_layers, nan);
  return f;
}

// Both targets' fit quality on the held-out windows (TargetFit), counting their tokens.
std::vector<TargetFit> heldout_fits(model::Forward& forward, std::span<const int32_t> prefix,
                                    const std::vector<std::span<const int32_t>>& heldout,
                                    const format::ScorerFile (&both)[2], const TrainOptions& o,
                                    uint64_t& heldout_tokens, uint32_t& done, uint32_t total) {
  const ModelConfig& c = forward.config();
  const uint32_t L = c.n_layers, E = c.d_model, Hkv = c.n_kv_heads;
  std::vector<TargetFit> fits;
  std::vector<Heldout> held(size_t(2) * L * Hkv);
  std::vector<float> pred;
  for (std::span<const int32_t> w : heldout) {
    const WindowTargets t = window_targets(forward, prefix, w, o.scorer);
    pred.resize(size_t(Hkv) * t.n);
    for (uint32_t which = 0; which < 2; ++which)
      for (uint32_t l = 0; l < L; ++l) {
        if (c.is_local(l)) continue;
        predict_layer(both[which], l, t.x.data() + size_t(l) * t.n * E, t.n, pred.data(), t.n);
        for (uint32_t k = 0; k < Hkv; ++k) {
          Heldout& h = held[(size_t(which) * L + l) * Hkv + k];
          for (uint32_t j = 0; j < t.n; ++j) {
            h.target.push_back(t.y[(size_t(l) * t.n + j) * 2 * Hkv + which * Hkv + k]);
            h.predicted.push_back(pred[size_t(k) * t.n + j]);
          }
        }
      }
    heldout_tokens += w.size();
    if (o.progress) o.progress(++done, total);
  }
  for (uint32_t which = 0; which < 2; ++which) {
    TargetFit fit{both[which].target, both[which].r2, both[which].spearman};
    for (uint32_t l = 0; l < L; ++l) {
      // Within each KV head (selection ranks a head's rows against each other), averaged over
      // the heads: pooling the heads would credit the predictor for the heads' different means.
      double r2 = 0, rho = 0;
      for (uint32_t k = 0; k < Hkv; ++k) {
        const Heldout& h = held[(size_t(which) * L + l) * Hkv + k];
        r2 += r_squared(h.target, h.predicted) / Hkv;
        rho += spearman(h.target, h.predicted) / Hkv;
      }
      if (!held[(size_t(which) * L + l) * Hkv].target.empty()) {
        fit.r2[l] = float(r2);
        fit.spearman[l] = float(rho);
      }
    }
    fits.push_back(std::move(fit));
  }
  return fits;
}

}  // namespace

TrainResult train_scorer(model::Forward& forward, std::span<const int32_t> prefix,
                         const std::vector<std::vector<int32_t>>& texts, const TrainOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  const ModelConfig& c = forward.config();
  const uint32_t L = c.n_layers, E = c.d_model, Hkv = c.n_kv_heads;
  std::vector<std::span<const int32_t>> train, heldout;
  for (const std::vector<int32_t>& t : texts)
    for (std::span<const int32_t> w : calibration_windows(t, o.window)) {
      const size_t k = train.size() + heldout.size() + 1;
      (o.heldout_every && k % o.heldout_every == 0 ? heldout : train).push_back(w);
    }
  if (train.empty()) throw Error(Errc::invalid_argument, "calibrate: no calibration tokens");
  const uint32_t total = uint32_t(train.size() + heldout.size());
  std::vector<RidgeSystem> systems;
  for (uint32_t l = 0; l < L; ++l) systems.emplace_back(E, 2 * Hkv);
  TrainResult r;
  uint32_t done = 0;
  for (std::span<const int32_t> w : train) {
    const WindowTargets t = window_targets(forward, prefix, w, o.scorer);
    for (uint32_t l = 0; l < L; ++l)
      if (!c.is_local(l))
        systems[l].add(t.x.data() + size_t(l) * t.n * E, E, t.y.data() + size_t(l) * t.n * 2 * Hkv,
                       t.n);
    r.file.train_tokens += w.size();
    if (o.progress) o.progress(++done, total);
  }
  std::vector<std::vector<double>> coef(L);
  for (uint32_t l = 0; l < L; ++l) {
    if (c.is_local(l)) continue;
    if (systems[l].rows() < uint64_t(E) + 1 && o.alpha <= 0)
      throw Error(Errc::invalid_argument, "calibrate: " + std::to_string(systems[l].rows()) +
                                              " training rows for " + std::to_string(E + 1) +
                                              " unknowns and no ridge penalty");
    coef[l] = systems[l].solve(o.alpha);
  }
  const format::ScorerFile both[2] = {as_file(c, coef, 0, o.alpha), as_file(c, coef, 1, o.alpha)};
  uint64_t heldout_tokens = 0;
  r.fits = heldout_fits(forward, prefix, heldout, both, o, heldout_tokens, done, total);
  const uint32_t chosen = o.target == format::ScorerTarget::Kvzip ? 0 : 1;
  const uint64_t train_tokens = r.file.train_tokens;
  r.file = both[chosen];
  r.file.r2 = r.fits[chosen].r2;
  r.file.spearman = r.fits[chosen].spearman;
  r.file.window = o.window;
  r.file.train_windows = uint32_t(train.size());
  r.file.heldout_windows = uint32_t(heldout.size());
  r.file.train_tokens = train_tokens;
  r.file.heldout_tokens = heldout_tokens;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace kvzip::compress
