// Test support: deterministic random tensors, tiny model configurations and random fp32 Weights
// for them, and the error measures the tests compare with. Everything is seeded and identical on
// every platform (own uniform mapping of mt19937_64 output, no std distributions).
#pragma once
#include <cstdint>
#include <vector>

#include "checkpoint/weights.h"

namespace kvzip::test {

// n values uniform in [lo, hi).
std::vector<float> random_vector(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f);

// L=2, E=64, Hq=4, Hkv=2, D=16, F=96, V=97, tied embeddings, no bias, rope base 10000.
ModelConfig tiny_llama_config();
// The qwen2 flavour: q/k/v biases, untied LM head, rope base 1e6, Hq=6, Hkv=2 (G=3).
ModelConfig tiny_qwen2_config();

// Weights of the right shapes for `cfg`, small enough that activations stay O(1) through the
// layers: matrices uniform in ±1/sqrt(in), norm weights near 1, biases ±0.1, embeddings ±1.
model::Weights random_weights(const ModelConfig& cfg, uint64_t seed);

// max |got - want| / max |want| (0 when both are all zero).
double rel_error(const float* got, const float* want, size_t n);
inline double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  return got.size() == want.size() ? rel_error(got.data(), want.data(), got.size()) : 1e30;
}

}  // namespace kvzip::test
