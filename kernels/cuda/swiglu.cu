// CUDA SwiGLU (twin of kernels/cpu/swiglu.cc): y = silu(gate) * up elementwise, silu(g) =
// g / (1 + e^-g) in fp32 with the accurate expf (for g << 0, e^-g overflows to inf and the
// quotient is -0, as on the CPU). Grid-stride loop; y may alias gate or up (same index only).
#include <cuda_bf16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/swiglu.h"

namespace kvzip::kernels::cuda {
namespace {

constexpr unsigned kThreads = 256;

template <class OutT>
__global__ void swiglu_kernel(const float* gate, const float* up, OutT* y, size_t n) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    const float v = g / (1.0f + expf(-g)) * up[i];
    if constexpr (sizeof(OutT) == 4) {
      y[i] = v;
    } else {
      y[i] = __float2bfloat16_rn(v);
    }
  }
}

unsigned grid_for(size_t n) {
  const size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65536 ? blocks : 65536);
}

}  // namespace

void swiglu(const SwigluArgs& a, void* stream) {
  if (a.n == 0) return;
  swiglu_kernel<<<grid_for(a.n), kThreads, 0, as_stream(stream)>>>(a.gate, a.up, a.y, a.n);
  KVZIP_CUDA_CHECK_LAUNCH();
}

void swiglu_bf16(const SwigluArgs& a, uint16_t* y_bf16, void* stream) {
  if (a.n == 0) return;
  auto* y = reinterpret_cast<__nv_bfloat16*>(y_bf16);
  swiglu_kernel<<<grid_for(a.n), kThreads, 0, as_stream(stream)>>>(a.gate, a.up, y, a.n);
  KVZIP_CUDA_CHECK_LAUNCH();
}

}  // namespace kvzip::kernels::cuda
