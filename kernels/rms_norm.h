// RMSNorm front: y[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * w, per row, fp32. y may equal
// x (in place). Matches the Hugging Face Llama order: normalise in fp32, then scale by the weight.
#pragma once
#include <cstdint>

#include "kernels/device.h"

namespace kvzip {

struct RmsNormArgs {
  const float* x = nullptr;  // (T, E)
  const float* w = nullptr;  // (E)
  float* y = nullptr;        // (T, E); may be x
  uint32_t T = 0;
  uint32_t E = 0;
  float eps = 1e-5f;
};

namespace cpu {
void rms_norm(ThreadPool* pool, const RmsNormArgs& a);
}

inline void rms_norm(const Exec& ex, const RmsNormArgs& a) {
  require_cpu(ex, "rms_norm");
  cpu::rms_norm(ex.pool, a);
}

}  // namespace kvzip
