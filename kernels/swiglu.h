// SwiGLU front: y = silu(gate) * up elementwise, silu(g) = g / (1 + e^-g). y may equal gate.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/device.h"

namespace kvzip::kernels {

struct SwigluArgs {
  const float* gate = nullptr;  // (n) — typically (T, F) flattened
  const float* up = nullptr;    // (n)
  float* y = nullptr;           // (n); may be gate or up
  size_t n = 0;
};

namespace cpu {
void swiglu(ThreadPool* pool, const SwigluArgs& a);
}
namespace cuda {  // kernels/cuda/swiglu.cu; pointers are device memory
void swiglu(const SwigluArgs& a, void* stream);
// The same product written as bf16 into y_bf16 (n) instead of a.y (the down-projection input).
void swiglu_bf16(const SwigluArgs& a, uint16_t* y_bf16, void* stream);
}  // namespace cuda

inline void swiglu(const Exec& ex, const SwigluArgs& a) {
#if KVZIP_HAVE_CUDA
  if (ex.device == Device::Cuda) return cuda::swiglu(a, ex.stream);
#endif
  require_cpu(ex, "swiglu");
  cpu::swiglu(ex.pool, a);
}

}  // namespace kvzip::kernels
