// SwiGLU front: y = silu(gate) * up elementwise, silu(g) = g / (1 + e^-g). y may equal gate.
// With `gelu` set it is GeGLU instead (Gemma): y = gelu_tanh(gate) * up, gelu_tanh(g) =
// g / (1 + e^(-2z)), z = sqrt(2/pi)·(g + 0.044715·g^3), which is 0.5·g·(1 + tanh z). CPU only.
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
  bool gelu = false;  // GeGLU (tanh-approximated GELU) instead of silu
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
  if (ex.device == Device::Cuda && !a.gelu) return cuda::swiglu(a, ex.stream);
#endif
  require_cpu(ex, a.gelu ? "geglu" : "swiglu");
  cpu::swiglu(ex.pool, a);
}

}  // namespace kvzip::kernels
