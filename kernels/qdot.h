// 8-bit-activation integer products for quantized weights: Y(T, out) = X(T, in) · W(out, in)^T
// (+ bias) with W in Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K or Q6_K blocks, as stored.
// Each 32-element block of each row of X is quantized to int8 with one fp32 scale
// (x ≈ d·q, d = max|x| / 127, q rounded to nearest even), and every weight block is dotted with it
// in integers: for each 32-element weight group g (a whole block of the 32-element types, one
// sub-block of a K-quant super-block)
//     y += (fw_g · d_x) · Σ w_int · q_x  +  mw_g · (d_x · Σ q_x)
// where w_int is the group's integer weights (signed for Q8_0 and Q6_K's q − 32; the unsigned
// nibbles otherwise, with Q4_0/Q5_0's offset −8·d / −16·d as their min) and fw_g, mw_g its scale
// and min in fp32 (Q6_K's two
// 16-element sub-scales multiply inside the integer sum). The integer sums are exact; only the
// activation rounding (relative error ≤ 1/254 of the block's largest |x| per element) and fp32
// summation order differ from the fp32 product on the dequantized weights.
// W's bytes are read once per call for all T tokens (tiles of a few rows x a few tokens in
// registers), so batching B decode tokens into one call costs little more than one.
// The ISA (scalar reference, AVX2, AVX-512 VNNI) is picked at run time (QIsa, kernels/qgemv.h);
// an AMX-INT8 tile GEMM would slot in beside the VNNI one behind the same dispatch.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

#include "kernels/matmul.h"
#include "kernels/qgemv.h"
#include "kernels/quant.h"

namespace kvzip {

// One 32-element block of a quantized activation row.
struct Q8Act {
  float d = 0.0f;  // scale: x ≈ d·q
  float s = 0.0f;  // d · Σ q (the min term of Q4_1/Q5_1/Q4_K/Q5_K weights)
  int8_t q[32] = {};
};
static_assert(sizeof(Q8Act) == 40);

// Whether qdot reads weights of this type.
bool qdot_supported(quant::GgmlType t);

// Up to this many tokens qdot runs register tiles of a few rows x tokens (AVX2 or scalar); every
// token's result is bit-identical whatever T is, so batched decoding equals one token at a time.
inline constexpr uint32_t kQdotTileMaxT = kMatmulInt8MaxT;
// Whether `isa` has the prefill GEMM (AVX-512 VNNI: T > kQdotTileMaxT tokens in 16-token vectors,
// the same integer sums, fp32 accumulation in another order). Without it, matmul's Fast path
// hands T > kQdotTileMaxT to fp32 slabs + sgemm.
bool qdot_has_gemm(QIsa isa);

namespace cpu {
// x (T, in) -> out (T, in / 32) blocks; in must be a multiple of 32. Deterministic: every ISA's
// kernel reads the same blocks; an AVX-512 CPU computes them in vectors, bit for bit what the
// portable loop (quantize_acts_portable, the reference) gives.
void quantize_acts(const float* x, uint32_t T, uint32_t in, Q8Act* out);
void quantize_acts_portable(const float* x, uint32_t T, uint32_t in, Q8Act* out);

// Runs every job on the 8-bit path with `isa` (which must be available, else Errc::unsupported).
// Jobs must be checked matmul jobs (kvzip::cpu::matmul's checks) of qdot_supported types; row
// maps and biases are honoured. Jobs with the same x pointer, T and in share one quantization.
void qdot(ThreadPool* pool, std::span<const MatmulArgs> jobs, QIsa isa);
}  // namespace cpu

}  // namespace kvzip
