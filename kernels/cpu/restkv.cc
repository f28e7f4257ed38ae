// ReST-KV's probe probabilities and output change (kernels/restkv.h). The norms ‖W_o x‖ are taken
// as sqrt(xᵀ·(Gram·x)) over tiles of 256 keys, one (tile × D)·(D × D) sgemm each, so the cost per
// head is O(N·D²) after the O(E·D²) Gram, and the memory O(tile·D).
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/error.h"
#include "kernels/restkv.h"
#include "kernels/simd.h"

namespace kvzip::kernels::cpu {
namespace {

constexpr uint32_t kNormTile = 256;  // keys per X·Gram sgemm

}  // namespace

void restkv_probe(const RestKvProbeArgs& a) {
  const uint32_t N = a.N, w = a.w;
  KVZIP_ASSERT(a.q && a.k && a.probs && w >= 1 && w <= N && a.D > 0);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(w), int(N), int(a.D), a.scale, a.q,
              int(a.q_stride), a.k, int(a.D), 0.0f, a.probs, int(N));
  for (uint32_t t = 0; t < w; ++t) {
    float* row = a.probs + size_t(t) * N;
    const uint32_t valid = N - w + t + 1;
    simd::softmax(row, valid);
    std::fill(row + valid, row + N, 0.0f);
  }
}

void restkv_output_change(const RestKvOutputChangeArgs& a) {
  const uint32_t D = a.D;
  KVZIP_ASSERT(a.abar && a.v && a.wo && a.out && a.n <= a.N && D > 0 && a.E > 0);
  thread_local std::vector<float> obar, gram, x, y;
  obar.resize(D);
  cblas_sgemv(CblasRowMajor, CblasTrans, int(a.N), int(D), 1.0f, a.v, int(D), a.abar, 1, 0.0f,
              obar.data(), 1);
  gram.resize(size_t(D) * D);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(D), int(D), int(a.E), 1.0f, a.wo,
              int(a.wo_stride), a.wo, int(a.wo_stride), 0.0f, gram.data(), int(D));
  x.resize(size_t(kNormTile) * D);
  y.resize(size_t(kNormTile) * D);
  for (uint32_t j0 = 0; j0 < a.n; j0 += kNormTile) {
    const uint32_t n = std::min(kNormTile, a.n - j0);
    for (uint32_t r = 0; r < n; ++r)
      for (uint32_t d = 0; d < D; ++d) x[size_t(r) * D + d] = obar[d] - a.v[size_t(j0 + r) * D + d];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(n), int(D), int(D), 1.0f, x.data(),
                int(D), gram.data(), int(D), 0.0f, y.data(), int(D));
    for (uint32_t r = 0; r < n; ++r) {
      double n2 = 0.0;
      for (uint32_t d = 0; d < D; ++d) n2 += double(x[size_t(r) * D + d]) * y[size_t(r) * D + d];
      const float p = a.abar[j0 + r];
      a.out[j0 + r] = p >= 1.0f ? std::numeric_limits<float>::infinity()
                                : static_cast<float>(p / (1.0 - p) * std::sqrt(std::max(n2, 0.0)));
    }
  }
}

}  // namespace kvzip::kernels::cpu
