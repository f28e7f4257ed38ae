// Deterministic random tensors and tiny random models for the tests (see random_weights.h).
#include "tests/support/random_weights.h"

#include "tests/support/model_shapes.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace kvzip::test {

std::vector<float> random_vector(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 1);
  std::vector<float> v(n);
  for (auto& x : v) {
    double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;  // [0, 1)
    x = static_cast<float>(lo + (hi - lo) * u);
  }
  return v;
}

ModelConfig tiny_llama_config() {
  return config_of(
      {"llama", 2, 64, 4, 2, 16, 96, 97, 2048, 10000.0f, 1e-5f, /*tied=*/true, /*bias=*/false});
}

ModelConfig tiny_qwen2_config() {
  return config_of(
      {"qwen2", 2, 96, 6, 2, 16, 96, 97, 2048, 1000000.0f, 1e-6f, /*tied=*/false, /*bias=*/true});
}

model::Weights random_weights(const ModelConfig& cfg, uint64_t seed) {
  uint64_t s = seed * 1000;
  auto mat = [&](size_t out, size_t in) {
    float a = 1.0f / std::sqrt(static_cast<float>(in));
    return model::Matrix::from_f32(random_vector(out * in, ++s, -a, a), uint32_t(out),
                                   uint32_t(in));
  };
  auto embedding = [&](size_t V, size_t E) {
    return model::Matrix::from_f32(random_vector(V * E, ++s), uint32_t(V), uint32_t(E));
  };
  auto norm = [&](size_t n) { return random_vector(n, ++s, 0.8f, 1.2f); };
  auto bias = [&](size_t n) { return random_vector(n, ++s, -0.1f, 0.1f); };
  return shaped_weights(cfg, mat, embedding, norm, bias);
}

double rel_error(const float* got, const float* want, size_t n) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(got[i])) return 1e30;
    diff = std::max(diff, std::fabs(double(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(double(want[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

}  // namespace kvzip::test
