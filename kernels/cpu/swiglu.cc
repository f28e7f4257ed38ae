// CPU SwiGLU and GeGLU with the vector exp of kernels/simd.h; the scalar tail uses std::exp.
#include "kernels/swiglu.h"

#include <cmath>

#include "kernels/simd.h"
#include "kernels/thread_pool.h"

namespace kvzip::kernels::cpu {
namespace {

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2/pi)

// gelu_tanh(g) * u as g · sigmoid(2z): one exp per element, like silu.
void geglu_range(const SwigluArgs& a, size_t b, size_t e) {
  using simd::kLanes;
  using simd::VecF;
  size_t i = b;
  for (; i + kLanes <= e; i += kLanes) {
    VecF g = simd::load(a.gate + i);
    VecF u = simd::load(a.up + i);
    VecF z2 = simd::splat(2.0f * kGeluC) * (g + simd::splat(0.044715f) * g * g * g);
    simd::store(a.y + i, g / (simd::splat(1.0f) + simd::exp_vec(-z2)) * u);
  }
  for (; i < e; ++i) {
    const float g = a.gate[i];
    a.y[i] = 0.5f * g * (1.0f + std::tanh(kGeluC * (g + 0.044715f * g * g * g))) * a.up[i];
  }
}

void swiglu_range(const SwigluArgs& a, size_t b, size_t e) {
  if (a.gelu) return geglu_range(a, b, e);
  using simd::kLanes;
  using simd::VecF;
  size_t i = b;
  for (; i + kLanes <= e; i += kLanes) {
    VecF g = simd::load(a.gate + i);
    VecF u = simd::load(a.up + i);
    VecF s = g / (simd::splat(1.0f) + simd::exp_vec(-g));
    simd::store(a.y + i, s * u);
  }
  for (; i < e; ++i) {
    float g = a.gate[i];
    a.y[i] = g / (1.0f + std::exp(-g)) * a.up[i];
  }
}

}  // namespace

void swiglu(ThreadPool* pool, const SwigluArgs& a) {
  constexpr size_t kGrain = 4096;
  auto range = [&](size_t b, size_t e) { swiglu_range(a, b, e); };
  if (pool && a.n > kGrain) {
    // Ranges start at multiples of kGrain so vector loads stay on lane boundaries.
    size_t n_tasks = (a.n + kGrain - 1) / kGrain;
    pool->run(n_tasks, [&](size_t t) {
      size_t b = t * kGrain;
      range(b, b + kGrain < a.n ? b + kGrain : a.n);
    });
  } else {
    range(0, a.n);
  }
}

}  // namespace kvzip::kernels::cpu
