// kernels/elementwise.h: grid-stride elementwise kernels of the GPU forward.
#include <cuda_bf16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/elementwise.h"

namespace kvzip::kernels::cuda {
namespace {

constexpr unsigned kThreads = 256;

unsigned grid_for(size_t n) {
  const size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65536 ? blocks : 65536);
}

#define KVZIP_GRID_STRIDE(i, n)                                           \
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += size_t(gridDim.x) * blockDim.x)

__global__ void to_bf16_kernel(const float* x, __nv_bfloat16* y, size_t n) {
  KVZIP_GRID_STRIDE(i, n) y[i] = __float2bfloat16_rn(x[i]);
}

__global__ void add_kernel(float* x, const float* y, size_t n) {
  KVZIP_GRID_STRIDE(i, n) x[i] += y[i];
}

__global__ void bias_kernel(float* y, const float* b, size_t n, uint32_t out) {
  KVZIP_GRID_STRIDE(i, n) y[i] += b[i % out];
}

__global__ void embed_kernel(const __nv_bfloat16* table, const int32_t* tokens, float* x, size_t n,
                             uint32_t E) {
  KVZIP_GRID_STRIDE(i, n) {
    const size_t t = i / E, e = i % E;
    x[i] = __bfloat162float(table[size_t(tokens[t]) * E + e]);
  }
}

// splitmix64 of (seed, i) -> [0, 1) with 24 bits.
__device__ __forceinline__ float unit_hash(uint64_t seed, size_t i) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (uint64_t(i) + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return float(z >> 40) * (1.0f / 16777216.0f);
}

__global__ void fill_kernel(float* y, size_t n, uint64_t seed, float lo, float hi) {
  KVZIP_GRID_STRIDE(i, n) y[i] = lo + (hi - lo) * unit_hash(seed, i);
}

__global__ void fill_bf16_kernel(__nv_bfloat16* y, size_t n, uint64_t seed, float lo, float hi) {
  KVZIP_GRID_STRIDE(i, n) y[i] = __float2bfloat16_rn(lo + (hi - lo) * unit_hash(seed, i));
}

#undef KVZIP_GRID_STRIDE

}  // namespace

void to_bf16(const float* x, uint16_t* y, size_t n, void* stream) {
  if (!n) return;
  to_bf16_kernel<<<grid_for(n), kThreads, 0, as_stream(stream)>>>(
      x, reinterpret_cast<__nv_bfloat16*>(y), n);
  KVZIP_CUDA_CHECK_LAUNCH();
}

void add_in_place(float* x, const float* y, size_t n, void* stream) {
  if (!n) return;
  add_kernel<<<grid_for(n), kThreads, 0, as_stream(stream)>>>(x, y, n);
  KVZIP_CUDA_CHECK_LAUNCH();
}

void add_bias(float* y, const float* bias, uint32_t T, uint32_t out, void* stream) {
  const size_t n = size_t(T) * out;
  if (!n) return;
  bias_kernel<<<grid_for(n), kThreads, 0, as_stream(stream)>>>(y, bias, n, out);
  KVZIP_CUDA_CHECK_LAUNCH();
}

void fill_uniform(float* y, size_t n, uint64_t seed, float lo, float hi, void* stream) {
  if (!n) return;
  fill_kernel<<<grid_for(n), kThreads, 0, as_stream(stream)>>>(y, n, seed, lo, hi);
  KVZIP_CUDA_CHECK_LAUNCH();
}

void fill_uniform_bf16(uint16_t* y, size_t n, uint64_t seed, float lo, float hi, void* stream) {
  if (!n) return;
  fill_bf16_kernel<<<grid_for(n), kThreads, 0, as_stream(stream)>>>(
      reinterpret_cast<__nv_bfloat16*>(y), n, seed, lo, hi);
  KVZIP_CUDA_CHECK_LAUNCH();
}

void embed_bf16(const uint16_t* table, const int32_t* tokens, float* x, uint32_t T, uint32_t E,
                void* stream) {
  const size_t n = size_t(T) * E;
  if (!n) return;
  embed_kernel<<<grid_for(n), kThreads, 0, as_stream(stream)>>>(
      reinterpret_cast<const __nv_bfloat16*>(table), tokens, x, n, E);
  KVZIP_CUDA_CHECK_LAUNCH();
}

}  // namespace kvzip::kernels::cuda
