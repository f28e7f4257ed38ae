// CPU RoPE: inverse frequencies with scaling, cos/sin tables, and the in-place rotation of the
// half-split pairs (x[i], x[i + D/2]) of every head.
#include "kernels/rope.h"

#include <cmath>
#include <string>

#include "common/error.h"
#include "kernels/thread_pool.h"

namespace kvzip::kernels {
namespace {

[[noreturn]] void bad_rope(const std::string& what) {
  throw Error(Errc::invalid_argument, "RoPE configuration: " + what +
                                          "; check the model's rope fields (config.json or GGUF)");
}

// Llama 3.1 rule: long wavelengths are divided by factor, short ones kept, and the band between
// low_freq_wavelen and high_freq_wavelen interpolated smoothly.
double llama3_adjust(double f, const RopeScaling& s) {
  const double two_pi = 6.283185307179586;
  double old_ctx = s.original_context;
  double low_wavelen = old_ctx / s.low_freq_factor;
  double high_wavelen = old_ctx / s.high_freq_factor;
  double wavelen = two_pi / f;
  if (wavelen < high_wavelen) return f;
  if (wavelen > low_wavelen) return f / s.factor;
  double smooth =
      (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  return (1.0 - smooth) * f / s.factor + smooth * f;
}

void check_scaling(const RopeScaling& s) {
  switch (s.kind) {
    case RopeScalingKind::None: return;
    case RopeScalingKind::Linear:
      if (!(s.factor > 0))
        bad_rope("linear scaling factor is " + std::to_string(s.factor) + ", expected > 0");
      return;
    case RopeScalingKind::Llama3:
      if (!(s.factor > 0))
        bad_rope("llama3 scaling factor is " + std::to_string(s.factor) + ", expected > 0");
      if (!(s.low_freq_factor > 0) || !(s.high_freq_factor > s.low_freq_factor))
        bad_rope("llama3 low/high_freq_factor are " + std::to_string(s.low_freq_factor) + "/" +
                 std::to_string(s.high_freq_factor) + ", expected 0 < low < high");
      if (s.original_context == 0) bad_rope("llama3 original_context is 0, expected > 0");
      return;
  }
  bad_rope("unknown scaling kind " + std::to_string(static_cast<uint32_t>(s.kind)));
}

}  // namespace

std::vector<float> rope_inv_freq(uint32_t D, float base, const RopeScaling& scaling) {
  if (D == 0 || D % 2 != 0)
    bad_rope("head_dim is " + std::to_string(D) + ", expected even and > 0");
  if (!(base > 1.0f)) bad_rope("rope base is " + std::to_string(base) + ", expected > 1");
  check_scaling(scaling);
  if (!scaling.freq_factors.empty()) {
    if (scaling.freq_factors.size() != D / 2)
      bad_rope("rope frequency factors: " + std::to_string(scaling.freq_factors.size()) +
               " values, expected head_dim / 2 = " + std::to_string(D / 2));
    for (float v : scaling.freq_factors)
      if (!(v > 0.0f) || !std::isfinite(v))
        bad_rope("rope frequency factor " + std::to_string(v) + " is not a positive number");
  }
  std::vector<float> inv(D / 2);
  for (uint32_t i = 0; i < D / 2; ++i) {
    double f = std::pow(static_cast<double>(base), -2.0 * i / D);
    if (scaling.kind == RopeScalingKind::Linear) f /= scaling.factor;
    if (scaling.kind == RopeScalingKind::Llama3) f = llama3_adjust(f, scaling);
    if (!scaling.freq_factors.empty()) f /= scaling.freq_factors[i];
    inv[i] = static_cast<float>(f);
  }
  return inv;
}

void build_rope_table(const std::vector<float>& inv_freq, const uint32_t* positions, uint32_t T,
                      RopeTable* out) {
  uint32_t half = static_cast<uint32_t>(inv_freq.size());
  out->T = T;
  out->half = half;
  out->cos.resize(size_t(T) * half);
  out->sin.resize(size_t(T) * half);
  for (uint32_t t = 0; t < T; ++t) {
    float pos = static_cast<float>(positions[t]);
    for (uint32_t i = 0; i < half; ++i) {
      float angle = pos * inv_freq[i];  // fp32 product, as the reference implementation forms it
      out->cos[size_t(t) * half + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      out->sin[size_t(t) * half + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
}

namespace cpu {

void rope(ThreadPool* pool, const RopeArgs& a) {
  uint32_t half = a.D / 2;
  auto rows = [&](size_t b, size_t e) {
    for (size_t t = b; t < e; ++t) {
      const float* c = a.cos + t * half;
      const float* s = a.sin + t * half;
      for (uint32_t h = 0; h < a.H; ++h) {
        float* x = a.x + (t * a.H + h) * a.D;
        for (uint32_t i = 0; i < half; ++i) {
          float x0 = x[i], x1 = x[i + half];
          x[i] = x0 * c[i] - x1 * s[i];
          x[i + half] = x1 * c[i] + x0 * s[i];
        }
      }
    }
  };
  if (pool && a.T > 32) {
    pool->parallel_for(a.T, 32, rows);
  } else {
    rows(0, a.T);
  }
}

}  // namespace cpu
}  // namespace kvzip::kernels
