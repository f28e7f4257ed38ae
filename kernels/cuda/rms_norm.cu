// CUDA RMSNorm (twin of kernels/cpu/rms_norm.cc): one block of 256 threads per row; each thread
// sums the squares of a strided slice in fp32, the block reduces through shared memory, then every
// thread scales the same elements it read (so y == x in place is safe: no element is read after
// another thread wrote it). x is therefore not __restrict__: in place, y aliases it, and a
// restrict promise would let the compiler reorder or cache reads of x across the writes to y.
// The bf16 variant writes the GEMM input directly.
#include <cuda_bf16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/rms_norm.h"

namespace kvzip::kernels::cuda {
namespace {

constexpr int kThreads = 256;

struct Out32 {
  float* y;
  __device__ void put(size_t i, float v) const { y[i] = v; }
};
struct Out16 {
  __nv_bfloat16* y;
  __device__ void put(size_t i, float v) const { y[i] = __float2bfloat16_rn(v); }
};

template <class Out>
__global__ void __launch_bounds__(kThreads)
    rms_norm_kernel(const float* x, const float* __restrict__ w, Out out, uint32_t E, float eps) {
  __shared__ float partial[kThreads / 32];
  const size_t row = blockIdx.x;
  const float* xr = x + row * E;
  float ss = 0.0f;
  for (uint32_t e = threadIdx.x; e < E; e += kThreads) ss += xr[e] * xr[e];
  ss = warp_sum(ss);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = ss;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int i = 0; i < kThreads / 32; ++i) total += partial[i];
  const float inv = rsqrtf(total / static_cast<float>(E) + eps);
  for (uint32_t e = threadIdx.x; e < E; e += kThreads) out.put(row * E + e, w[e] * (xr[e] * inv));
}

}  // namespace

void rms_norm(const RmsNormArgs& a, void* stream) {
  if (a.T == 0) return;
  rms_norm_kernel<<<a.T, kThreads, 0, as_stream(stream)>>>(a.x, a.w, Out32{a.y}, a.E, a.eps);
  KVZIP_CUDA_CHECK_LAUNCH();
}

void rms_norm_bf16(const RmsNormArgs& a, uint16_t* y_bf16, void* stream) {
  if (a.T == 0) return;
  Out16 out{reinterpret_cast<__nv_bfloat16*>(y_bf16)};
  rms_norm_kernel<<<a.T, kThreads, 0, as_stream(stream)>>>(a.x, a.w, out, a.E, a.eps);
  KVZIP_CUDA_CHECK_LAUNCH();
}

}  // namespace kvzip::kernels::cuda
