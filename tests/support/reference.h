// Test support: naive reference implementations of the CPU kernels (plain loops, double
// accumulation, no threads, vectors or blocking), the oracle the kernel tests and the CUDA parity
// tests compare against. Test-only: nothing outside tests/ links it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/attention.h"

namespace kvzip::ref {

// y(T, out) = x(T, in) · w(out, in)^T + bias (bias may be null).
void gemm(const float* x, const float* w, const float* bias, float* y, uint32_t T, uint32_t in,
          uint32_t out);

// y(T, E) = x / sqrt(mean(x^2) + eps) * w, row by row.
void rms_norm(const float* x, const float* w, float* y, uint32_t T, uint32_t E, float eps);

// x(T, H, D) rotated in place, pairs (i, i + D/2), angle = float(pos) * inv_freq[i] in fp32.
void rope(float* x, uint32_t T, uint32_t H, uint32_t D, const uint32_t* positions,
          const std::vector<float>& inv_freq);

// y(n) = silu(gate) * up.
void swiglu(const float* gate, const float* up, float* y, size_t n);

// Causal GQA attention with the contract of kernels/attention.h, each score row materialised.
void attention(const kernels::AttentionArgs& a);

}  // namespace kvzip::ref
