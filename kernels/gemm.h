// GEMM front: Y(T, out) = X(T, in) · W(out, in)^T (+ bias), fp32, row-major. W is stored the way
// every weight in checkpoint/weights.h is: one row per output feature. For T == 1 (decode) a
// threaded GEMV on Exec::pool streams W once; for T > 1 OpenBLAS sgemm runs with set_blas_threads()
// threads.
#pragma once
#include <cstdint>

#include "kernels/device.h"

namespace kvzip::kernels {

struct GemmArgs {
  const float* x = nullptr;     // (T, in)
  const float* w = nullptr;     // (out, in)
  const float* bias = nullptr;  // (out) or nullptr
  float* y = nullptr;           // (T, out); must not overlap x or w
  uint32_t T = 0;
  uint32_t in = 0;
  uint32_t out = 0;
};

// Sets how many threads OpenBLAS uses for the T > 1 path (process-wide: OpenBLAS has one setting).
void set_blas_threads(uint32_t threads);

namespace cpu {
void gemm(ThreadPool* pool, const GemmArgs& a);
void gemv(ThreadPool* pool, const GemmArgs& a);  // the T == 1 path, any T accepted (row by row)
}  // namespace cpu

// The GPU GEMM: bf16 activations and weights (the weights are rounded once at load), fp32
// accumulation and fp32 output, through cublasGemmEx (kernels/cuda/gemm.cc). Device pointers.
struct GemmBf16Args {
  const uint16_t* x = nullptr;  // (T, in) bf16
  const uint16_t* w = nullptr;  // (out, in) bf16
  const float* bias = nullptr;  // (out) or nullptr
  float* y = nullptr;           // (T, out)
  uint32_t T = 0;
  uint32_t in = 0;
  uint32_t out = 0;
};
namespace cuda {
void gemm_bf16(const GemmBf16Args& a, void* stream);
}

inline void gemm(const Exec& ex, const GemmArgs& a) {
  require_cpu(ex, "gemm");
  cpu::gemm(ex.pool, a);
}

}  // namespace kvzip::kernels
