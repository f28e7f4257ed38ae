// The R-KV math (rkv.h) and the offline "rkv" scorer (spec/methods.md §4, offline variant for
// documents). Candidates of every (layer, KV head) = the document rows before its last α tokens:
// the prefix is never scored (always kept) and never enters I or R; the last α document tokens
// are the probe (their queries give the importance) and score +inf.
#include "compress/detail/rkv.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "common/error.h"
#include "compress/detail/scorers.h"
#include "compress/detail/window_queries.h"
#include "kernels/thread_pool.h"

namespace kvzip::detail {
namespace {

constexpr uint32_t kScanRows = 64;    // rows i per similarity tile
constexpr uint32_t kScanCols = 256;   // candidates j per similarity tile
constexpr uint32_t kProbeCols = 2048; // candidates per importance sgemm

std::vector<float> normalised(const float* k, uint32_t n, uint32_t D) {
  std::vector<float> kh(size_t(n) * D);
  for (uint32_t i = 0; i < n; ++i) {
    double ss = 0.0;
    for (uint32_t d = 0; d < D; ++d) ss += double(k[size_t(i) * D + d]) * k[size_t(i) * D + d];
    const double inv = 1.0 / std::max(std::sqrt(ss), 1e-12);
    for (uint32_t d = 0; d < D; ++d) kh[size_t(i) * D + d] = static_cast<float>(k[size_t(i) * D + d] * inv);
  }
  return kh;
}

// For rows [i0, i1): subtracts from col[j] the similarity S_ij of each row's most recent other
// candidate j with S_ij > threshold (rows with none subtract nothing). Rows that found theirs
// drop out of the later (earlier-positioned) column blocks, so one row without a similar key
// costs its own full scan, not its whole tile's.
void subtract_latest_similar(const std::vector<float>& kh, uint32_t n, uint32_t D, float threshold,
                             uint32_t i0, uint32_t i1, std::vector<float>& rows_buf,
                             std::vector<float>& sim, std::vector<double>& col) {
  uint32_t open[kScanRows], n_open = 0;  // rows still searching, ascending
  for (uint32_t i = i0; i < i1; ++i) open[n_open++] = i;
  rows_buf.resize(size_t(kScanRows) * D);
  sim.resize(size_t(kScanRows) * kScanCols);
  for (uint32_t c1 = n; c1 > 0 && n_open > 0;) {
    const uint32_t c0 = c1 > kScanCols ? c1 - kScanCols : 0, w = c1 - c0;
    for (uint32_t r = 0; r < n_open; ++r)
      std::copy_n(kh.data() + size_t(open[r]) * D, D, rows_buf.data() + size_t(r) * D);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(n_open), int(w), int(D), 1.0f,
                rows_buf.data(), int(D), kh.data() + size_t(c0) * D, int(D), 0.0f, sim.data(),
                int(w));
    uint32_t still = 0;
    for (uint32_t r = 0; r < n_open; ++r) {
      const float* s = sim.data() + size_t(r) * w;
      bool found = false;
      for (uint32_t c = w; c-- > 0 && !found;) {
        if (c0 + c == open[r] || !(s[c] > threshold)) continue;
        col[c0 + c] -= s[c];
        found = true;
      }
      if (!found) open[still++] = open[r];
    }
    n_open = still;
    c1 = c0;
  }
}

}  // namespace

void rkv_redundancy(const float* k, uint32_t n, uint32_t D, float threshold, float* R) {
  if (n == 0) return;
  const std::vector<float> kh = normalised(k, n, D);
  std::vector<double> u(D, 0.0);  // Σ_i k̂_i
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t d = 0; d < D; ++d) u[d] += kh[size_t(i) * D + d];
  std::vector<double> col(n);  // Σ_i S_ij with the diagonal zeroed
  for (uint32_t j = 0; j < n; ++j) {
    double dot = 0.0, self = 0.0;
    for (uint32_t d = 0; d < D; ++d) {
      const double x = kh[size_t(j) * D + d];
      dot += x * u[d];
      self += x * x;
    }
    col[j] = dot - self;
  }
  std::vector<float> rows_buf, sim;
  for (uint32_t i0 = 0; i0 < n; i0 += kScanRows)
    subtract_latest_similar(kh, n, D, threshold, i0, std::min(n, i0 + kScanRows), rows_buf, sim,
                            col);
  for (uint32_t j = 0; j < n; ++j) R[j] = static_cast<float>(col[j] / n);
  softmax_inplace(R, n);
}

void rkv_importance(const RkvProbe& p, const float* k, uint32_t n, uint32_t kernel, float* I) {
  if (n == 0) return;
  const uint32_t rows = p.tokens * p.G, D = p.D;
  std::vector<float> q(size_t(rows) * D);  // (tokens, G, D) gathered contiguously
  for (uint32_t t = 0; t < p.tokens; ++t)
    std::copy(p.q + t * p.q_stride, p.q + t * p.q_stride + size_t(p.G) * D,
              q.begin() + size_t(t) * p.G * D);
  std::vector<float> z(size_t(p.tokens) * n), logits(size_t(rows) * std::min(n, kProbeCols));
  for (uint32_t c0 = 0; c0 < n; c0 += kProbeCols) {
    const uint32_t w = std::min(kProbeCols, n - c0);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(w), int(D), p.scale,
                q.data(), int(D), k + size_t(c0) * D, int(D), 0.0f, logits.data(), int(w));
    for (uint32_t t = 0; t < p.tokens; ++t) {
      float* zt = z.data() + size_t(t) * n + c0;
      std::copy(logits.begin() + size_t(t) * p.G * w, logits.begin() + (size_t(t) * p.G + 1) * w, zt);
      for (uint32_t g = 1; g < p.G; ++g) {
        const float* lg = logits.data() + (size_t(t) * p.G + g) * w;
        for (uint32_t c = 0; c < w; ++c) zt[c] = std::max(zt[c], lg[c]);
      }
    }
  }
  std::vector<double> mean(n, 0.0);
  for (uint32_t t = 0; t < p.tokens; ++t) {
    float* zt = z.data() + size_t(t) * n;
    softmax_inplace(zt, n);
    for (uint32_t j = 0; j < n; ++j) mean[j] += zt[j];
  }
  const uint32_t half = kernel / 2;
  for (uint32_t j = 0; j < n; ++j) {
    const uint32_t lo = j >= half ? j - half : 0, hi = std::min(n, j + half + 1);
    I[j] = static_cast<float>(*std::max_element(mean.begin() + lo, mean.begin() + hi) / p.tokens);
  }
}

namespace {

constexpr float kAlwaysKeep = std::numeric_limits<float>::infinity();

class RkvScorer final : public WindowScorer {
 public:
  RkvScorer(uint32_t window, float lambda, float threshold, uint32_t kernel)
      : WindowScorer(window), lambda_(lambda), threshold_(threshold), kernel_(kernel) {}
  std::string name() const override { return "rkv"; }
  MethodParams params() const override {
    return {{"window", std::to_string(window_)},
            {"lambda", number(lambda_)},
            {"threshold", number(threshold_)},
            {"kernel", std::to_string(kernel_)},
            {"candidates", "document"}};
  }

  DocumentScores score(const ScoreInput& in) override {
    const WindowQueries& rec = observed(in, "rkv");
    DocumentScores s = make_scores(in, kAlwaysKeep);
    const ModelConfig& c = in.forward->config();
    const uint32_t n_p = s.n_prefix, n_cand = s.n_doc - rec.window();
    const uint32_t Hkv = c.n_kv_heads, G = c.group(), D = c.head_dim;
    if (n_cand == 0) return s;
    auto unit = [&](size_t u) {
      const uint32_t l = static_cast<uint32_t>(u / Hkv), h = static_cast<uint32_t>(u % Hkv);
      const float* k = in.cache->view(l, h).k + size_t(n_p) * D;  // (n_cand, D) candidates
      RkvProbe probe{rec.layer_queries(l) + size_t(h) * G * D, rec.window(),
                     uint64_t(c.n_heads) * D, G, D, 1.0f / std::sqrt(static_cast<float>(D))};
      std::vector<float> imp(n_cand), red(n_cand);
      rkv_importance(probe, k, n_cand, kernel_, imp.data());
      rkv_redundancy(k, n_cand, D, threshold_, red.data());
      float* out = s.values.data() + (size_t(l) * Hkv + h) * s.n_doc;
      for (uint32_t j = 0; j < n_cand; ++j) out[j] = lambda_ * imp[j] - (1.0f - lambda_) * red[j];
    };
    run_units(in.forward->pool(), size_t(c.n_layers) * Hkv, unit);
    return s;
  }

 private:
  static std::string number(float x) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", double(x));
    return b;
  }
  float lambda_, threshold_;
  uint32_t kernel_;
};

}  // namespace

std::unique_ptr<Scorer> make_rkv_scorer(const ScorerOptions& o) {
  if (o.rkv_window == 0)
    throw Error(Errc::invalid_argument, "rkv window is 0, expected >= 1 (default 8)");
  if (!(o.rkv_lambda >= 0.0f && o.rkv_lambda <= 1.0f))
    throw Error(Errc::invalid_argument, "rkv lambda is " + std::to_string(o.rkv_lambda) +
                                            ", expected 0 <= lambda <= 1 (default 0.1)");
  if (!(o.rkv_threshold >= -1.0f && o.rkv_threshold <= 1.0f))
    throw Error(Errc::invalid_argument, "rkv similarity threshold is " +
                                            std::to_string(o.rkv_threshold) +
                                            ", expected a cosine in [-1, 1] (default 0.5)");
  if (o.rkv_kernel == 0 || o.rkv_kernel % 2 == 0)
    throw Error(Errc::invalid_argument, "rkv pooling kernel is " + std::to_string(o.rkv_kernel) +
                                            ", expected an odd number >= 1 (default 7)");
  return std::make_unique<RkvScorer>(o.rkv_window, o.rkv_lambda, o.rkv_threshold, o.rkv_kernel);
}

}  // namespace kvzip::detail
