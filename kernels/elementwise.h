// Small CUDA-only helpers of the GPU forward pass, whose CPU counterparts are inline loops in
// model/detail/forward_layer.cc: fp32 -> bf16 (GEMM inputs), the residual add, bias add, and the
// embedding gather from a bf16 table. Device pointers, enqueued on `stream`
// (kernels/cuda/elementwise.cu).
#pragma once
#include <cstddef>
#include <cstdint>

namespace kvzip::kernels::cuda {

void to_bf16(const float* x, uint16_t* y, size_t n, void* stream);    // y(n) = bf16(x)
void add_in_place(float* x, const float* y, size_t n, void* stream);  // x(n) += y
void add_bias(float* y, const float* bias, uint32_t T, uint32_t out,
              void* stream);  // y(T, out) += b
// x(T, E) = fp32(table[tokens[t]]) for a (V, E) bf16 table; tokens (T) in device memory.
void embed_bf16(const uint16_t* table, const int32_t* tokens, float* x, uint32_t T, uint32_t E,
                void* stream);

// Deterministic pseudo-random fills for synthetic benchmark models (a hash of (seed, index), so
// results do not depend on the launch shape): uniform in [lo, hi).
void fill_uniform(float* y, size_t n, uint64_t seed, float lo, float hi, void* stream);
void fill_uniform_bf16(uint16_t* y, size_t n, uint64_t seed, float lo, float hi, void* stream);

}  // namespace kvzip::kernels::cuda
