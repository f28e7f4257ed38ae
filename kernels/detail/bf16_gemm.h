// Private to kernels/cpu/matmul.cc and the tests: the AVX-512 BF16 GEMM matmul's Fast path runs
// for F16/BF16 weights at prefill T (kernels/cpu/bf16_gemm_avx512.cc). Each product w·x is taken
// on bf16-rounded operands (round to nearest even: x always, w when it is F16), so it moves by at
// most (2^-8 + 2^-16)·|w·x|; sums are fp32.
// On a CPU with AMX-BF16 (and qisa_amx_bf16(), kernels/qgemv.h) the same products are taken by
// tdpbf16ps tiles (kernels/cpu/bf16_gemm_amx.cc): the same bf16 operands, fp32 sums in another
// order, so within the same bound; there the block types (Q4_0 ... Q6_K) go through it too, each
// weight's fp32 value (quant::dequantize_row) rounded to bf16, so again within
// (2^-8 + 2^-16)·|w·x|.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/matmul.h"

namespace kvzip::kernels::cpu::detail {

bool bf16_gemm_available();  // built with the variant and the CPU has AVX-512 F, BW, VL, BF16
// y = x · w^T for a checked matmul job (no bias): on the AMX-BF16 GEMM where it takes the matrix
// (bf16_gemm_amx_usable: F16, BF16 or a block type), else F16/BF16 with an even width on AVX-512
// BF16; Errc::internal otherwise.
void bf16_gemm(ThreadPool* pool, const MatmulArgs& a);

// x (T, in) fp32 -> u (nv, in / 2, 16, 2) bf16, nv = ceil(T / 16): two consecutive elements of
// 16 tokens per 64 bytes, lanes past T zero. Both GEMMs read this pack.
void pack_bf16_pairs(const float* x, uint32_t T, uint32_t in, std::vector<uint16_t>& u,
                     uint32_t& nv);
// Whether the AMX-BF16 kernel runs here (AVX-512 BF16 for the pack, and qisa_amx_bf16()); it
// takes F16, BF16 and block-type matrices (not F32) whose width is a multiple of its 32-element
// step; bf16_gemm hands it every such matrix.
bool bf16_gemm_amx_available();
bool bf16_gemm_amx_usable(const MatrixView& w);
// The AMX-BF16 GEMM alone (for the tests); Errc::internal where it is not usable for `a.w`.
void bf16_gemm_amx(ThreadPool* pool, const MatmulArgs& a);

}  // namespace kvzip::kernels::cpu::detail
