// 8-bit-activation integer products for quantized weights: Y(T, out) = X(T, in) · W(out, in)^T
// (+ bias) with W in Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K or Q6_K blocks, as stored.
// Each 32-element block of each row of X is quantized to int8 with one fp32 scale
// (x ≈ d·q, d = max|x| / 127, q rounded to nearest even), and every weight block is dotted with it
// in integers. For each output (row, token) every kernel computes one fp32 chain, in this order:
//     acc = 0
//     for each 32-element weight group g (a whole block of the 32-element types, one sub-block of
//     a K-quant super-block), I = Σ w_int · q_x over the group (exact int32):
//         types with a min:  acc = acc + fma(float(I), d_x · ws_g, s_x · mw_g)
//         Q8_0:              acc = fma(float(I), d_x · ws_g, acc)
//         Q6_K:              acc = fma(float(I_0), d_x · ws_g0, acc); then the same with I_1, ws_g1
//                            (I_j over the group's two 16-element halves)
//     y = acc (+ bias)
// (the min's product is formed beside the chain, so the chain has one dependent step per group)
// where w_int is the group's integer weights (signed for Q8_0 and Q6_K's q − 32; the unsigned
// nibbles otherwise, with Q4_0/Q5_0's offset −8·d / −16·d as their min), ws the group's fp32
// scale (Q6_K: fw · float(sub_j), one product), mw_g its min, d_x the activation block's scale and
// s_x = d_x · Σ q_x. The integer sums are exact, and every kernel (scalar, AVX2 tiles, VNNI tiles,
// AVX2, VNNI and AMX GEMMs) runs exactly this chain, so a token's result is bit-identical whatever
// T, the batch it shares a call with, and the CPU's instruction set; only the activation rounding
// (relative error <= 1/254 of the block's largest |x| per element) and the fp32 chain differ from
// the fp32 product on the dequantized weights.
// W's bytes are read once per call for all T tokens (tiles of a few rows x a few tokens in
// registers), so batching B decode tokens into one call costs little more than one.
// The ISA (scalar reference, AVX2, AVX-512 VNNI, AMX-INT8) is picked at run time (QIsa,
// kernels/qgemv.h); each x86 ISA has register tiles for short T and a GEMM from a few tokens on
// (AVX2 from kQdotAvx2GemmMinT, VNNI from kQdotGemmMinT or kQdotDecode16GemmMinT); AMX runs the
// VNNI kernels below kQdotAmxMinT tokens and its tile GEMM from there (kernels/cpu/qdot_amx.cc),
// the same chain again.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

#include "kernels/matmul.h"
#include "kernels/qgemv.h"
#include "kernels/quant.h"

namespace kvzip::kernels {

// One 32-element block of a quantized activation row.
struct Q8Act {
  float d = 0.0f;  // scale: x ≈ d·q
  float s = 0.0f;  // d · Σ q (the min term of Q4_1/Q5_1/Q4_K/Q5_K weights)
  int8_t q[32] = {};
};
static_assert(sizeof(Q8Act) == 40);

// Whether qdot reads weights of this type.
bool qdot_supported(quant::GgmlType t);

// From this many tokens qdot runs the GEMM where the ISA has one (below it the register tiles of a
// few rows x tokens are as fast or faster). The choice is speed only: both compute the same chain.
inline constexpr uint32_t kQdotGemmMinT = 8;
// With AVX-512 VNNI the types that have sixteen-row decode kernels (every type qdot reads)
// run them instead, eight tokens a pass over each tile, up to these many tokens: a serving batch's
// step then reads its weights once at about the decode speed, where the GEMM's 16-token vectors
// sit mostly empty. Each limit is where the GEMM draws level (two threads, 1B-shaped layers,
// bench_decode --tokens); Q6_K and Q8_0 reach it sooner. Speed only again: the same chain.
inline constexpr uint32_t kQdotDecode16GemmMinT = 48;
inline constexpr uint32_t kQdotDecode16GemmMinTQ6K = 24;
inline constexpr uint32_t kQdotDecode16GemmMinTQ8_0 = 32;
// From this many tokens QIsa::Amx runs its tile GEMM (below, the VNNI kernels); Q6_K, whose
// 16-element sub-blocks take two tile steps per group, from kQdotAmxMinTQ6K (below it the tiles
// measure no faster than the VNNI GEMM). Speed only again.
inline constexpr uint32_t kQdotAmxMinT = 16;
inline constexpr uint32_t kQdotAmxMinTQ6K = 256;
// From this many tokens an AVX2 (or AVX-512 without VNNI) CPU runs its GEMM
// (kernels/cpu/qdot_x86.cc) instead of the register tiles; Q8_0, whose signed weights cost the GEMM
// a sign, a widening and an add per 4-element step (the nibble types: one add), from
// kQdotAvx2GemmMinTQ8_0 — measured below the tiles up to 48 tokens, level with them beyond.
// Speed only: the same chain.
inline constexpr uint32_t kQdotAvx2GemmMinT = 16;
inline constexpr uint32_t kQdotAvx2GemmMinTQ8_0 = 49;
// Whether `isa` has a GEMM (AVX2, AVX-512 VNNI or AMX: tokens in 16-token vectors, the same chain).
// Without it (the scalar build), matmul's Fast path hands T > kMatmulInt8MaxT to
// fp32 slabs + sgemm.
bool qdot_has_gemm(QIsa isa);

namespace cpu {
// x (T, in) -> out (T, in / 32) blocks; in must be a multiple of 32. Deterministic: every ISA's
// kernel reads the same blocks; an AVX2 or AVX-512 CPU computes them in vectors, bit for bit what
// the portable loop (quantize_acts_portable, the reference) gives.
void quantize_acts(const float* x, uint32_t T, uint32_t in, Q8Act* out);
void quantize_acts_portable(const float* x, uint32_t T, uint32_t in, Q8Act* out);

// Runs every job on the 8-bit path with `isa` (which must be available, else Errc::unsupported).
// Jobs must be checked matmul jobs (kernels::cpu::matmul's checks) of qdot_supported types; row
// maps and biases are honoured. Jobs with the same x pointer, T and in share one quantization.
void qdot(ThreadPool* pool, std::span<const MatmulArgs> jobs, QIsa isa);
}  // namespace cpu

}  // namespace kvzip::kernels
