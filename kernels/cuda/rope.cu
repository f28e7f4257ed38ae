// CUDA RoPE (twin of kernels/cpu/rope.cc): the half-split rotation of (x[i], x[i + D/2]) with the
// precomputed cos/sin tables (T, D/2) in device memory. One thread per (token, head, pair): each
// pair is read and written by one thread only, so the in-place update needs no barrier.
#include "kernels/cuda/common.cuh"
#include "kernels/rope.h"

namespace kvzip::kernels::cuda {
namespace {

__global__ void rope_kernel(float* __restrict__ x, const float* __restrict__ cos_t,
                            const float* __restrict__ sin_t, uint32_t T, uint32_t H,
                            uint32_t half) {
  const size_t idx = size_t(blockIdx.x) * blockDim.x + threadIdx.x;  // over (T, H, half)
  const size_t total = size_t(T) * H * half;
  if (idx >= total) return;
  const uint32_t i = static_cast<uint32_t>(idx % half);
  const size_t th = idx / half;  // token * H + head
  const size_t t = th / H;
  float* v = x + th * (2 * size_t(half));
  const float c = cos_t[t * half + i], s = sin_t[t * half + i];
  const float x0 = v[i], x1 = v[i + half];
  v[i] = x0 * c - x1 * s;
  v[i + half] = x1 * c + x0 * s;
}

}  // namespace

void rope(const RopeArgs& a, void* stream) {
  const size_t total = size_t(a.T) * a.H * (a.D / 2);
  if (total == 0) return;
  constexpr unsigned kThreads = 256;
  rope_kernel<<<ceil_div(total, kThreads), kThreads, 0, as_stream(stream)>>>(a.x, a.cos, a.sin, a.T,
                                                                             a.H, a.D / 2);
  KVZIP_CUDA_CHECK_LAUNCH();
}

}  // namespace kvzip::kernels::cuda
