// Private to kernels/cpu/matmul.cc and the tests: the AVX-512 BF16 GEMM matmul's Fast path runs
// for F16/BF16 weights at prefill T (kernels/cpu/bf16_gemm_avx512.cc). Each product w·x is taken
// on bf16-rounded operands (round to nearest even: x always, w when it is F16), so it moves by at
// most (2^-8 + 2^-16)·|w·x|; sums are fp32.
#pragma once

#include "kernels/matmul.h"

namespace kvzip::kernels::cpu::detail {

bool bf16_gemm_available();  // built with the variant and the CPU has AVX-512 F, BW, VL, BF16
// y = x · w^T for a checked matmul job with F16 or BF16 weights and an even width (no bias);
// Errc::internal otherwise or where bf16_gemm_available() is false.
void bf16_gemm(ThreadPool* pool, const MatmulArgs& a);

}  // namespace kvzip::kernels::cpu::detail
