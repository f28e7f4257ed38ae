// Naive reference kernels (tests/support/reference.h): the straightforward formulas, double sums.
#include "tests/support/reference.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace kvzip::ref {

void gemm(const float* x, const float* w, const float* bias, float* y, uint32_t T, uint32_t in,
          uint32_t out) {
  for (uint32_t t = 0; t < T; ++t) {
    for (uint32_t o = 0; o < out; ++o) {
      double s = bias ? bias[o] : 0.0;
      for (uint32_t i = 0; i < in; ++i) s += double(x[size_t(t) * in + i]) * w[size_t(o) * in + i];
      y[size_t(t) * out + o] = static_cast<float>(s);
    }
  }
}

void rms_norm(const float* x, const float* w, float* y, uint32_t T, uint32_t E, float eps) {
  for (uint32_t t = 0; t < T; ++t) {
    double ss = 0;
    for (uint32_t e = 0; e < E; ++e) ss += double(x[size_t(t) * E + e]) * x[size_t(t) * E + e];
    double inv = 1.0 / std::sqrt(ss / E + eps);
    for (uint32_t e = 0; e < E; ++e)
      y[size_t(t) * E + e] = static_cast<float>(x[size_t(t) * E + e] * inv * w[e]);
  }
}

void rope(float* x, uint32_t T, uint32_t H, uint32_t D, const uint32_t* positions,
          const std::vector<float>& inv_freq) {
  const uint32_t half = D / 2;
  for (uint32_t t = 0; t < T; ++t) {
    for (uint32_t h = 0; h < H; ++h) {
      float* v = x + (size_t(t) * H + h) * D;
      for (uint32_t i = 0; i < half; ++i) {
        double angle = static_cast<float>(positions[t]) * inv_freq[i];
        double c = std::cos(angle), s = std::sin(angle);
        double x0 = v[i], x1 = v[i + half];
        v[i] = static_cast<float>(x0 * c - x1 * s);
        v[i + half] = static_cast<float>(x1 * c + x0 * s);
      }
    }
  }
}

void swiglu(const float* gate, const float* up, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    double g = gate[i];
    y[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

void attention(const kernels::AttentionArgs& a) {
  const uint32_t G = a.Hq / a.Hkv;
  for (uint32_t hq = 0; hq < a.Hq; ++hq) {
    const kernels::KvSpan& kv = a.kv[hq / G];
    const uint32_t n0 = kv.len - a.T;
    for (uint32_t i = 0; i < a.T; ++i) {
      const float* q = a.q + (size_t(i) * a.Hq + hq) * a.D;
      const uint32_t visible = n0 + i + 1;
      std::vector<double> p(visible);
      double mx = -INFINITY;
      for (uint32_t j = 0; j < visible; ++j) {
        double s = 0;
        for (uint32_t d = 0; d < a.D; ++d) s += double(q[d]) * kv.k_row(j, a.D)[d];
        p[j] = s * a.scale;
        mx = std::max(mx, p[j]);
      }
      double sum = 0;
      for (uint32_t j = 0; j < visible; ++j) sum += (p[j] = std::exp(p[j] - mx));
      float* o = a.out + (size_t(i) * a.Hq + hq) * a.D;
      for (uint32_t d = 0; d < a.D; ++d) {
        double acc = 0;
        for (uint32_t j = 0; j < visible; ++j) acc += p[j] * kv.v_row(j, a.D)[d];
        o[d] = static_cast<float>(acc / sum);
      }
    }
  }
}

}  // namespace kvzip::ref
