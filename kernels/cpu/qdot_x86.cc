// AVX2 kernels of the 8-bit-activation product (kernels/qdot.h), compiled with function target
// attributes (AVX2, FMA, F16C, like qgemv_x86.cc) and called only when the CPU reports them:
//  - the register tiles of kernels/detail/qdot_tiles_x86.inc (short batches) and, for one token,
//    the decode kernels of kernels/detail/qdot_decode_avx2.inc (eight rows at memory bandwidth);
//  - the GEMM for prefill-sized T: the VNNI GEMM's blocking (kernels/detail/gemm_tiles.h) and
//    weight panel (kernels/detail/qdot_panel_x86.h) with the products of vpmaddubsw + vpmaddwd.
//
// The GEMM's arithmetic. A token vector is 16 tokens (the shared pack, kSignedPack: q, not q + 128)
// read as two 8-token halves; each step takes 4 elements of every token (32 bytes) against one
// broadcast dword of 4 weights. vpmaddubsw multiplies unsigned bytes by signed ones: the unsigned
// weights (the nibble types' 0..15 / 0..31) go first as they are; signed weights (Q8_0, Q6_K's
// q − 32) through the sign trick, |w| times sign(w)·q. Its int16 pair sums are added up over
// kRun16 steps while no sum can leave int16 (each pair is at most 2·|w|max·127), then widened
// exactly by vpmaddwd with ones, so each (row, token) lane holds the group's exact Σ w_int·q —
// the integer of the scalar kernel — and takes the chain's fp32 step (kernels/qdot.h) in group
// order: every token gets the scalar reference's bits, as from the tiles and the other GEMMs.
// Why this is faster than fp32 on these CPUs: 32 multiply-adds per vpmaddubsw, against 8 per FMA.
// Also here: the activation quantizer in AVX2 (the portable one's bytes).
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

#include "common/error.h"

#include "kernels/detail/gemm_tiles.h"
#include "kernels/detail/qdot_panel_x86.h"
#include "kernels/detail/qdot_x86.h"

namespace kvzip::kernels::cpu::detail {

#if KVZIP_QDOT_X86

using quant::GgmlType;
using x86::group_ints;
using x86::half_f16c;

namespace avx2_tiles {
#define KVZIP_QT_TARGET KVZIP_AVX2
#define KVZIP_QT_VNNI 0
#include "kernels/detail/qdot_tiles_x86.inc"
#undef KVZIP_QT_VNNI
#undef KVZIP_QT_TARGET
}  // namespace avx2_tiles

namespace {

using x86::decode_panel;
using x86::kSubElems;
using x86::Panel;

constexpr uint32_t kTileVecs = 1;      // 16-token vectors per tile (two 8-token halves)
constexpr uint32_t kChunkGroups = 16;  // 32-element groups per column chunk (512 columns)

// Largest |w_int| of a type: the bound on vpmaddubsw's pair sums (2·|w|max·127 each).
template <GgmlType Ty>
constexpr int kWMax = Ty == GgmlType::Q8_0                                                     ? 128
                      : Ty == GgmlType::Q6_K                                                   ? 32
                      : (Ty == GgmlType::Q5_0 || Ty == GgmlType::Q5_1 || Ty == GgmlType::Q5_K) ? 31
                                                                                               : 15;
// Steps (4 elements each) whose int16 pair sums are added before widening: the most, dividing a
// scale group's steps, that cannot leave int16 (Q4 types 8: 30,480; Q5 4: 31,496; Q6_K 4:
// 32,512; Q8_0 1: 32,512).
template <GgmlType Ty>
constexpr int run16() {
  int n = kSubElems<Ty> / 4;
  while (n > 1 && n * 2 * kWMax<Ty> * 127 > 32767) n /= 2;
  return n;
}

inline int32_t load_i32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// acc (R, 16) += rows [i0, i0 + R) of the panel x token vector v, groups [g0, g1).
template <GgmlType Ty, int R>
KVZIP_AVX2 void micro(const Panel& p, uint32_t in, const QActPack& x, uint32_t v, uint32_t i0,
                      uint32_t g0, uint32_t g1, float* acc_io) {
  constexpr int kSub = kSubElems<Ty>, kSteps = kSub / 4, kSubs = 32 / kSub, kRun = run16<Ty>();
  constexpr bool kSignedW = QFmt<Ty>::kSigned;
  static_assert(!QFmt<Ty>::kMin || kSubs == 1, "the types with a min have one sub-block per group");
  static_assert(kSteps % kRun == 0);
  const uint32_t ng = in / 32, nsub = in / kSub, in4 = in / 4;
  const uint8_t* xu = x.u.data() + size_t(v) * in4 * 64;
  const float* xd = x.d.data() + size_t(v) * ng * 16;
  const float* xs = x.s.data() + size_t(v) * ng * 16;
  const int8_t* wr[R];
  const float* sr[R];
  for (int r = 0; r < R; ++r) {
    wr[r] = p.w.data() + size_t(i0 + r) * p.stride;
    sr[r] = p.ws.data() + size_t(i0 + r) * nsub;
  }
  const __m256i ones = _mm256_set1_epi16(1);
  for (uint32_t g = g0; g < g1; ++g) {
    for (int h = 0; h < kSubs; ++h) {
      const uint32_t j = g * kSubs + h, k4 = g * 8 + h * kSteps;
      // Pointers at the sub-block, so the unrolled steps below address with constant offsets.
      const uint8_t* xg = xu + size_t(k4) * 64;
      const int8_t* wg[R];
      for (int r = 0; r < R; ++r) wg[r] = wr[r] + size_t(k4) * 4;
      __m256i is[R][2];  // exact Σ w·q of each (row, half)
#pragma GCC unroll 2
      for (int st0 = 0; st0 < kSteps; st0 += kRun) {
        __m256i s16[R][2];
        for (int r = 0; r < R; ++r) s16[r][0] = s16[r][1] = _mm256_setzero_si256();
#pragma GCC unroll 2
        for (int st = st0; st < st0 + kRun; ++st) {
          const __m256i a0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xg + st * 64));
          const __m256i a1 =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xg + st * 64 + 32));
          for (int r = 0; r < R; ++r) {
            const __m256i wb = _mm256_set1_epi32(load_i32(wg[r] + st * 4));
            if constexpr (kSignedW) {
              const __m256i aw = _mm256_abs_epi8(wb);
              s16[r][0] =
                  _mm256_add_epi16(s16[r][0], _mm256_maddubs_epi16(aw, _mm256_sign_epi8(a0, wb)));
              s16[r][1] =
                  _mm256_add_epi16(s16[r][1], _mm256_maddubs_epi16(aw, _mm256_sign_epi8(a1, wb)));
            } else {
              s16[r][0] = _mm256_add_epi16(s16[r][0], _mm256_maddubs_epi16(wb, a0));
              s16[r][1] = _mm256_add_epi16(s16[r][1], _mm256_maddubs_epi16(wb, a1));
            }
          }
        }
        for (int r = 0; r < R; ++r)
          for (int c = 0; c < 2; ++c) {
            const __m256i w32 = _mm256_madd_epi16(s16[r][c], ones);
            is[r][c] = st0 == 0 ? w32 : _mm256_add_epi32(is[r][c], w32);
          }
      }
      for (int c = 0; c < 2; ++c) {
        const __m256 d = _mm256_loadu_ps(xd + size_t(g) * 16 + 8 * c);
        for (int r = 0; r < R; ++r) {
          float* out = acc_io + r * 16 + 8 * c;
          const __m256 i = _mm256_cvtepi32_ps(is[r][c]),
                       dw = _mm256_mul_ps(d, _mm256_set1_ps(sr[r][j]));
          __m256 acc = _mm256_loadu_ps(out);
          if constexpr (QFmt<Ty>::kMin) {  // acc += fma(I, d·ws, s·mw): the chain of kernels/qdot.h
            const __m256 sm = _mm256_mul_ps(_mm256_loadu_ps(xs + size_t(g) * 16 + 8 * c),
                                            _mm256_set1_ps(p.mw[size_t(i0 + r) * ng + g]));
            acc = _mm256_add_ps(acc, _mm256_fmadd_ps(i, dw, sm));
          } else {
            acc = _mm256_fmadd_ps(i, dw, acc);
          }
          _mm256_storeu_ps(out, acc);
        }
      }
    }
  }
}

template <GgmlType Ty>
KVZIP_AVX2 void gemm_avx2(const QDotRowsArgs& a, const QActPack& x) {
  const MatrixView& w = *a.w;
  thread_local Panel panel;
  thread_local std::vector<float> buf;
  for (uint32_t p0 = a.r0; p0 < a.r1; p0 += kPanelRows) {
    const uint32_t np = std::min(kPanelRows, a.r1 - p0);
    decode_panel<Ty, false>(w, p0, np, panel);
    const TileSpan span{np,        x.nv, a.T,    w.cols / 32, even_chunk(w.cols / 32, kChunkGroups),
                        kTileVecs, a.y,  w.rows, p0};
    run_tiles(
        span, buf,
        [&](uint32_t v0, uint32_t, uint32_t i0, uint32_t R, uint32_t g0, uint32_t g1, float* acc) {
          // Two rows at a time: four rows' int16 sums, with their operands, do not fit the 16
          // registers (measured: GCC spills them to the stack in every step).
          for (uint32_t r = 0; r < R; r += 2) {
            if (R - r >= 2) micro<Ty, 2>(panel, w.cols, x, v0, i0 + r, g0, g1, acc + r * 16);
            else micro<Ty, 1>(panel, w.cols, x, v0, i0 + r, g0, g1, acc + r * 16);
          }
        });
  }
}

// nearbyint(v·id) clamped to ±127, as 8 int32 (lambdas do not inherit the target attribute).
KVZIP_AVX2 inline __m256i round_clamp_127(__m256 v, __m256 id) {
  const __m256 r =
      _mm256_round_ps(_mm256_mul_ps(v, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return _mm256_cvtps_epi32(
      _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f)));
}

}  // namespace

KVZIP_AVX2 void quantize_acts_avx2(const float* x, size_t nblocks, Q8Act* out) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (size_t k = 0; k < nblocks; ++k) {
    const float* v = x + k * 32;
    __m256 a[4];
    for (int i = 0; i < 4; ++i) a[i] = _mm256_loadu_ps(v + 8 * i);
    __m256 m =
        _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(a[0], abs_mask), _mm256_and_ps(a[1], abs_mask)),
                      _mm256_max_ps(_mm256_and_ps(a[2], abs_mask), _mm256_and_ps(a[3], abs_mask)));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    // The portable quantizer's arithmetic step for step (kernels/cpu/qdot.cc): same d, same
    // products, round to nearest even, the same clamp; so the same bytes (tested).
    const float amax = _mm_cvtss_f32(h), d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
    const __m256 vid = _mm256_set1_ps(id);
    __m256i q[4];
    for (int i = 0; i < 4; ++i) q[i] = round_clamp_127(a[i], vid);
    // int32 -> int8 in element order: packs interleave the 128-bit lanes, the permute undoes it.
    const __m256i w01 = _mm256_packs_epi32(q[0], q[1]), w23 = _mm256_packs_epi32(q[2], q[3]);
    const __m256i b = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(w01, w23),
                                                  _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    Q8Act& o = out[k];
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o.q), b);
    const __m256i s4 = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s4), _mm256_extracti128_si256(s4, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    o.d = d;
    o.s = d * float(_mm_cvtsi128_si32(s));
  }
}

QDotFn qdot_rows_avx2(GgmlType t) {
  return pick_block_type<QDotFn>(
      t, [](auto T) -> QDotFn { return avx2_tiles::rows_tiles<decltype(T)::value>; });
}

QGemmFn qdot_gemm_avx2(GgmlType t) {
  return pick_block_type<QGemmFn>(t,
                                  [](auto T) -> QGemmFn { return gemm_avx2<decltype(T)::value>; });
}

#else  // no x86 variant in this build

QDotFn qdot_rows_avx2(quant::GgmlType) { return nullptr; }
QGemmFn qdot_gemm_avx2(quant::GgmlType) { return nullptr; }
void quantize_acts_avx2(const float*, size_t, Q8Act*) {
  throw Error(Errc::internal, "quantize_acts_avx2: not built for this CPU");
}

#endif

}  // namespace kvzip::kernels::cpu::detail
