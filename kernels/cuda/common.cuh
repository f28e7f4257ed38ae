// Support for the CUDA kernels (kernels/cuda/*.cu and other CUDA translation units): the error
// check that turns a failed runtime call into kvzip::Error(Errc::cuda) with file:line and the
// runtime's message, the launch check run after every kernel launch, warp reductions, and the
// head-dim switch. Included only by CUDA translation units (never by a CPU-only build).
#pragma once
#include <cuda_runtime.h>

#include <string>
#include <type_traits>

#include "common/error.h"

namespace kvzip::kernels::cuda {

[[noreturn]] inline void throw_cuda(cudaError_t e, const char* expr, const char* file, int line) {
  (void)cudaGetLastError();  // clear a sticky-free error so the next call starts clean
  const Errc code = e == cudaErrorMemoryAllocation ? Errc::out_of_memory : Errc::cuda;
  throw Error(code, std::string("CUDA error '") + cudaGetErrorString(e) + "' (" +
                        cudaGetErrorName(e) + ") from " + expr + " at " + file + ":" +
                        std::to_string(line));
}

#define KVZIP_CUDA_CHECK(expr)                                                   \
  do {                                                                           \
    cudaError_t kvzip_err_ = (expr);                                             \
    if (kvzip_err_ != cudaSuccess)                                               \
      ::kvzip::kernels::cuda::throw_cuda(kvzip_err_, #expr, __FILE__, __LINE__); \
  } while (0)

// After every launch: a bad configuration (too much shared memory, grid too large) shows here.
#define KVZIP_CUDA_CHECK_LAUNCH() KVZIP_CUDA_CHECK(cudaGetLastError())

inline cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

inline unsigned ceil_div(size_t a, size_t b) { return static_cast<unsigned>((a + b - 1) / b); }

#ifdef __CUDACC__
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
#endif

// Calls f(std::integral_constant<int, D>{}) for the head dims the attention kernels are compiled
// for (C++17: the lambda reads D as decltype(d)::value); throws Errc::unsupported for any other.
template <class F>
void dispatch_head_dim(uint32_t D, const char* op, F&& f) {
  switch (D) {
    case 64: f(std::integral_constant<int, 64>{}); return;
    case 128: f(std::integral_constant<int, 128>{}); return;
    default:
      throw Error(Errc::unsupported, std::string(op) + ": head_dim " + std::to_string(D) +
                                         " has no CUDA kernel (compiled for 64 and 128); use "
                                         "--device cpu for this model");
  }
}

}  // namespace kvzip::kernels::cuda
