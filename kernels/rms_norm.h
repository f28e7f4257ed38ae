// RMSNorm front: y[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * w, per row, fp32. y may equal
// x (in place). Matches the Hugging Face Llama order: normalise in fp32, then scale by the weight.
// CUDA twin: one block per row, fp32 sum of squares (kernels/cuda/rms_norm.cu).
#pragma once
#include <cstdint>

#include "kernels/device.h"

namespace kvzip::kernels {

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
namespace cuda {  // kernels/cuda/rms_norm.cu; pointers are device memory
void rms_norm(const RmsNormArgs& a, void* stream);
// The same normalisation written as bf16 into y_bf16 (T, E) instead of a.y (the GEMM input).
void rms_norm_bf16(const RmsNormArgs& a, uint16_t* y_bf16, void* stream);
}  // namespace cuda

inline void rms_norm(const Exec& ex, const RmsNormArgs& a) {
#if KVZIP_HAVE_CUDA
  if (ex.device == Device::Cuda) return cuda::rms_norm(a, ex.stream);
#endif
  require_cpu(ex, "rms_norm");
  cpu::rms_norm(ex.pool, a);
}

}  // namespace kvzip::kernels
