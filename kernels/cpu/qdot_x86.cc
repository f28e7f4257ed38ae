// AVX2 row kernels of the 8-bit-activation product (kernels/qdot.h), compiled with function target
// attributes (like qgemv_x86.cc) and called only when the CPU reports AVX2, FMA and F16C.
// A 32-element weight group is decoded into one register of 32 int8 (signed for Q8_0 and Q6_K,
// unsigned 0..31 for the others, whose offset or min goes through the activation sums);
// vpmaddubsw multiplies it with the activation's 32 int8 (signed x signed through the sign trick:
// |w| times sign(w)·q) into 16 int16 pair sums, which never saturate (|w| <= 128, |q| <= 127:
// 2·128·127 = 32,512), and vpmaddwd sums pairs into 8 exact int32 (weighted by Q6_K's two
// sub-scales). One FMA per group then adds (fw·d_x)·int32 to fp32 accumulators: the scalar
// kernel's arithmetic, lanes summed at the end.
// Tiles: R weight rows x C tokens; each group of a row is decoded once per tile and each
// activation group loaded once per row tile (shapes below). Tokens go in blocks of kTokenBlock so
// their activations stay in L2 while a task's rows pass over them.
#include <algorithm>

#include "kernels/detail/qdot_x86.h"

namespace kvzip::cpu::detail {

#if KVZIP_QDOT_X86

using quant::GgmlType;
using x86::group_ints;
using x86::half_f16c;

namespace {

constexpr uint32_t kTokenBlock = 32;
// Tile shapes, measured on the AVX2 EPYC (one thread, CPU time, 1024 x 2048 Q4_0, Q4_1, Q8_0,
// Q4_K, Q6_K): decode, 4 rows x 1 token (2-4 rows within 3%, 6-8 rows 10-20% slower); T >= 2, 1 row x 4 tokens
// (~53 GOP/s against 45 for 2 x 2 and 46-51 for 2 x 3, 3 x 2, 4 x 2, which spill registers).
constexpr int kDecodeRows = 4, kTileTokens = 4;
// Two software prefetches per row and block: 1 KiB ahead into L1 (as in qgemv_x86.cc), and the
// same block of the row the next tile will read into L2 — short rows (SmolLM2's 576 columns are
// 612 bytes of Q8_0) put 1 KiB ahead inside rows already being read. Measured (one thread, CPU
// time): Q8_0 49152 x 576 LM head 3.3 -> 1.9-2.5 ms, Q4_0 14336 x 4096 4.9 -> 3.5 ms; in-cache
// shapes unchanged.
constexpr size_t kPrefetchAhead = 1024;

KVZIP_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// y[c][k] = dot(row k, token c) for R rows x C tokens over all nblk blocks.
// `ahead`: the rows of the next tile, prefetched into L2.
template <GgmlType Ty, int R, int C>
KVZIP_AVX2 inline void tile(const uint8_t* const* rows, const uint8_t* const* ahead,
                            const Q8Act* const* xs, uint32_t nblk, float* const* y_tok, uint32_t r) {
  using F = QFmt<Ty>;
  __m256 acc[R][C];
  float off[R][C];
  for (int k = 0; k < R; ++k)
    for (int c = 0; c < C; ++c) acc[k][c] = _mm256_setzero_ps(), off[k][c] = 0.0f;
  const __m256i ones = _mm256_set1_epi16(1);
  BlockScales s[R];
  for (uint32_t b = 0; b < nblk; ++b) {
    for (int k = 0; k < R; ++k) {
      const uint8_t* blk = rows[k] + size_t(b) * F::kBytes;
      _mm_prefetch(reinterpret_cast<const char*>(ahead[k] + size_t(b) * F::kBytes), _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(blk) + kPrefetchAhead, _MM_HINT_T0);
      F::scales(blk, half_f16c, s[k]);
    }
#pragma GCC unroll 8
    for (int g = 0; g < F::kGroups; ++g) {
#pragma GCC unroll 4
      for (int k = 0; k < R; ++k) {
        const __m256i w = group_ints<Ty>(rows[k] + size_t(b) * F::kBytes, g);
        const __m256i wa = F::kSigned ? _mm256_abs_epi8(w) : w;
        __m256i sc = ones;
        if constexpr (Ty == GgmlType::Q6_K)
          sc = _mm256_set_m128i(_mm_set1_epi16(s[k].sub[g][1]), _mm_set1_epi16(s[k].sub[g][0]));
#pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
          const Q8Act& xa = xs[c][b * F::kGroups + g];
          __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xa.q));
          if constexpr (F::kSigned) q = _mm256_sign_epi8(q, w);
          const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(wa, q), sc);
          acc[k][c] = _mm256_fmadd_ps(_mm256_set1_ps(s[k].fw[g] * xa.d), _mm256_cvtepi32_ps(p), acc[k][c]);
          if constexpr (F::kMin) off[k][c] += s[k].mw[g] * xa.s;
        }
      }
    }
  }
  for (int k = 0; k < R; ++k)
    for (int c = 0; c < C; ++c) y_tok[c][r + k] = hsum(acc[k][c]) + off[k][c];
}

// Rows [r, r + R) x tokens [t, t + C), any C <= kTileTokens.
template <GgmlType Ty, int R>
KVZIP_AVX2 inline void tile_c(const QDotRowsArgs& a, uint32_t r, uint32_t t, uint32_t C) {
  const MatrixView& w = *a.w;
  const uint32_t ng = w.cols / 32, nblk = ng / QFmt<Ty>::kGroups;
  const uint8_t* rows[R];
  const uint8_t* ahead[R];
  for (int k = 0; k < R; ++k) {
    rows[k] = w.data + size_t(w.row_map ? w.row_map[r + k] : r + k) * w.row_bytes;
    const uint32_t n = std::min(r + R + k, w.rows - 1);  // the next tile's row (or the last)
    ahead[k] = w.data + size_t(w.row_map ? w.row_map[n] : n) * w.row_bytes;
  }
  const Q8Act* xs[4];
  float* ys[4];
  for (uint32_t c = 0; c < C; ++c) xs[c] = a.x + size_t(t + c) * ng, ys[c] = a.y + size_t(t + c) * w.rows;
  switch (C) {
    case 1: tile<Ty, R, 1>(rows, ahead, xs, nblk, ys, r); break;
    case 2: tile<Ty, R, 2>(rows, ahead, xs, nblk, ys, r); break;
    case 3: tile<Ty, R, 3>(rows, ahead, xs, nblk, ys, r); break;
    default: tile<Ty, R, 4>(rows, ahead, xs, nblk, ys, r); break;
  }
}

template <GgmlType Ty>
KVZIP_AVX2 void rows_avx2(const QDotRowsArgs& a) {
  if (a.T == 1) {  // decode: rows share each activation load, one FMA chain per row
    uint32_t r = a.r0;
    for (; r + kDecodeRows <= a.r1; r += kDecodeRows) tile_c<Ty, kDecodeRows>(a, r, 0, 1);
    for (; r < a.r1; ++r) tile_c<Ty, 1>(a, r, 0, 1);
    return;
  }
  for (uint32_t t0 = 0; t0 < a.T; t0 += kTokenBlock) {
    const uint32_t t1 = std::min(a.T, t0 + kTokenBlock);
    for (uint32_t r = a.r0; r < a.r1; ++r)
      for (uint32_t t = t0; t < t1; t += kTileTokens)
        tile_c<Ty, 1>(a, r, t, std::min<uint32_t>(kTileTokens, t1 - t));
  }
}

}  // namespace

QDotFn qdot_rows_avx2(GgmlType t) {
  return pick_block_type<QDotFn>(t, [](auto T) -> QDotFn { return rows_avx2<decltype(T)::value>; });
}

#else  // no x86 variant in this build

QDotFn qdot_rows_avx2(quant::GgmlType) { return nullptr; }

#endif

}  // namespace kvzip::cpu::detail
