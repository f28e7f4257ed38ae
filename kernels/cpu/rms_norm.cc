// CPU RMSNorm: rows split over the pool; the sum of squares is accumulated in vector lanes.
#include "kernels/rms_norm.h"

#include <cmath>

#include "kernels/simd.h"
#include "kernels/thread_pool.h"

namespace kvzip::kernels::cpu {
namespace {

void rms_norm_row(const float* x, const float* w, float* y, uint32_t E, float eps) {
  using simd::kLanes;
  simd::VecF acc{};
  uint32_t i = 0;
  for (; i + kLanes <= E; i += kLanes) {
    simd::VecF v = simd::load(x + i);
    acc += v * v;
  }
  float ss = simd::hsum(acc);
  for (; i < E; ++i) ss += x[i] * x[i];
  float inv = 1.0f / std::sqrt(ss / static_cast<float>(E) + eps);
  for (uint32_t e = 0; e < E; ++e) y[e] = w[e] * (x[e] * inv);
}

}  // namespace

void rms_norm(ThreadPool* pool, const RmsNormArgs& a) {
  auto rows = [&](size_t b, size_t e) {
    for (size_t t = b; t < e; ++t) rms_norm_row(a.x + t * a.E, a.w, a.y + t * a.E, a.E, a.eps);
  };
  if (pool && a.T > 16) {
    pool->parallel_for(a.T, 16, rows);
  } else {
    rows(0, a.T);
  }
}

}  // namespace kvzip::kernels::cpu
