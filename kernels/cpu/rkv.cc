// R-KV's importance and redundancy (kernels/rkv.h). Both reduce to sgemm tiles plus row scans;
// nothing of size n² is formed. Accumulations that sum n terms (column sums, the importance mean)
// are in double.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/error.h"
#include "kernels/rkv.h"
#include "kernels/simd.h"

namespace kvzip::kernels::cpu {
namespace {

constexpr uint32_t kScanRows = 64;     // rows i per similarity tile
constexpr uint32_t kScanCols = 256;    // candidates j per similarity tile
constexpr uint32_t kProbeCols = 2048;  // candidates per importance sgemm

std::vector<float> unit_rows(const float* k, uint32_t n, uint32_t D) {
  std::vector<float> kh(size_t(n) * D);
  for (uint32_t i = 0; i < n; ++i) {
    const float* x = k + size_t(i) * D;
    double ss = 0.0;
    for (uint32_t d = 0; d < D; ++d) ss += double(x[d]) * x[d];
    const double inv = ss > 0.0 ? 1.0 / std::sqrt(ss) : 0.0;
    for (uint32_t d = 0; d < D; ++d) kh[size_t(i) * D + d] = static_cast<float>(x[d] * inv);
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

void rkv_redundancy(const RkvRedundancyArgs& a) {
  const uint32_t n = a.n, D = a.D;
  if (n == 0) return;
  KVZIP_ASSERT(a.k && a.out && D > 0);
  const std::vector<float> kh = unit_rows(a.k, n, D);
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
    subtract_latest_similar(kh, n, D, a.threshold, i0, std::min(n, i0 + kScanRows), rows_buf, sim,
                            col);
  for (uint32_t j = 0; j < n; ++j) a.out[j] = static_cast<float>(col[j] / n);
  simd::softmax(a.out, n);
}

void rkv_importance(const RkvImportanceArgs& a) {
  const uint32_t n = a.n, D = a.D, G = a.G;
  if (n == 0) return;
  KVZIP_ASSERT(a.q && a.k && a.out && a.tokens > 0 && G > 0 && D > 0 && a.kernel % 2 == 1);
  const uint32_t rows = a.tokens * G;
  std::vector<float> q(size_t(rows) * D);  // (tokens, G, D) gathered contiguously
  for (uint32_t t = 0; t < a.tokens; ++t)
    std::copy_n(a.q + t * a.q_stride, size_t(G) * D, q.begin() + size_t(t) * G * D);
  std::vector<float> z(size_t(a.tokens) * n), logits(size_t(rows) * std::min(n, kProbeCols));
  for (uint32_t c0 = 0; c0 < n; c0 += kProbeCols) {
    const uint32_t w = std::min(kProbeCols, n - c0);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(w), int(D), a.scale,
                q.data(), int(D), a.k + size_t(c0) * D, int(D), 0.0f, logits.data(), int(w));
    for (uint32_t t = 0; t < a.tokens; ++t) {  // max over the group, on logits
      float* zt = z.data() + size_t(t) * n + c0;
      std::copy_n(logits.begin() + size_t(t) * G * w, w, zt);
      for (uint32_t g = 1; g < G; ++g) {
        const float* lg = logits.data() + (size_t(t) * G + g) * w;
        for (uint32_t c = 0; c < w; ++c) zt[c] = std::max(zt[c], lg[c]);
      }
    }
  }
  std::vector<double> mean(n, 0.0);
  for (uint32_t t = 0; t < a.tokens; ++t) {
    float* zt = z.data() + size_t(t) * n;
    simd::softmax(zt, n);
    for (uint32_t j = 0; j < n; ++j) mean[j] += zt[j];
  }
  const uint32_t half = a.kernel / 2;
  for (uint32_t j = 0; j < n; ++j) {
    const uint32_t lo = j >= half ? j - half : 0, hi = std::min(n, j + half + 1);
    a.out[j] =
        static_cast<float>(*std::max_element(mean.begin() + lo, mean.begin() + hi) / a.tokens);
  }
}

}  // namespace kvzip::kernels::cpu
