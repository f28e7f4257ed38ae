// AVX-512 VNNI kernels of the 8-bit-activation product (kernels/qdot.h): the register tiles of
// kernels/detail/qdot_tiles_x86.inc with vpdpbusd (T < kQdotGemmMinT), and, below, the GEMM from
// kQdotGemmMinT tokens: the same exact integer sums per 32-element group as the scalar kernel,
// with 64 multiply-adds per vpdpbusd instead of AVX2's maddubs + madd pair per 32, and the same
// fp32 chain, so both (and the AVX2 tiles) give every token the same bits. Compiled with function
// target attributes; called only when the CPU reports AVX-512 F, BW, VL and VNNI
// (cpu_has_avx512_vnni).
//
// Layout (why it is shaped so): vpdpbusd multiplies unsigned bytes by signed bytes and sums each
// lane's four products into an int32. Lanes are 16 tokens: the activations are packed once per
// call (pack_acts_vnni: q + 128, four consecutive elements of 16 tokens per 64 bytes), and the
// weights are the signed side, one broadcast dword of four elements per instruction, so a weight
// row is used as stored order after a linear decode and needs no transpose. The +128 offset adds
// 128·Σw over each group to every sum; that is an integer per row and group (corr), subtracted
// before the conversion, so each group's sum is exactly Σ w_int·q.
// Per group and (row, 16 tokens) the chain of kernels/qdot.h on I = isum − corr: the scalar
// kernel's and the tiles' bits, so a token's result does not depend on which kernel ran.
// Q6_K's 16-element sub-scales make its groups 16 elements (fw · sub as one fp32 scale).
//
// Blocking: a task (kernels::cpu::qdot: 32 rows) decodes its rows into an int8 panel once
// (thread-local, in L2), then for each tile of kTileVecs·16 tokens and each kChunkGroups·32 columns
// runs R-row x C-vector micro-kernels whose activation chunk stays in L1; fp32 partial sums live in
// a small per-tile buffer between column chunks and go to y (T, out) at the end of the tile.
#include <algorithm>
#include <cstddef>
#include <cstring>

#include "common/error.h"

#include "kernels/detail/gemm_tiles.h"
#include "kernels/detail/qdot_panel_x86.h"
#include "kernels/detail/qdot_x86.h"

namespace kvzip::kernels::cpu::detail {

#if KVZIP_QDOT_X86

bool cpu_has_avx512_vnni() {
  static const bool ok = cpu_has_avx512() && __builtin_cpu_supports("avx512vl") &&
                         __builtin_cpu_supports("avx512vnni");
  return ok;
}

namespace {

using quant::GgmlType;
using x86::decode_panel;
using x86::group_ints;
using x86::half_f16c;
using x86::kSubElems;
using x86::Panel;

constexpr uint32_t kTileVecs = 3;      // 16-token vectors per tile
constexpr uint32_t kChunkGroups = 16;  // 32-element groups per column chunk (512 columns)

inline int32_t load_i32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// acc (R, C, 16) += rows [i0, i0 + R) of the panel x token vectors [v0, v0 + C), groups [g0, g1).
template <GgmlType Ty, int R, int C>
KVZIP_VNNI void micro(const Panel& p, uint32_t in, const QActPack& x, uint32_t v0, uint32_t i0,
                      uint32_t g0, uint32_t g1, float* acc_io) {
  constexpr int kSub = kSubElems<Ty>, kSteps = kSub / 4, kSubs = 32 / kSub;
  static_assert(!QFmt<Ty>::kMin || kSubs == 1, "the types with a min have one sub-block per group");
  const uint32_t ng = in / 32, nsub = in / kSub, in4 = in / 4;
  __m512 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_loadu_ps(acc_io + (r * C + c) * 16);
  const uint8_t* xu[C];
  const float* xd[C];
  const float* xs[C];
  for (int c = 0; c < C; ++c) {
    xu[c] = x.u.data() + size_t(v0 + c) * in4 * 64;
    xd[c] = x.d.data() + size_t(v0 + c) * ng * 16;
    xs[c] = x.s.data() + size_t(v0 + c) * ng * 16;
  }
  const int8_t* wr[R];
  const int32_t* cr[R];
  const float* sr[R];
  for (int r = 0; r < R; ++r) {
    wr[r] = p.w.data() + size_t(i0 + r) * p.stride;
    cr[r] = p.corr.data() + size_t(i0 + r) * nsub;
    sr[r] = p.ws.data() + size_t(i0 + r) * nsub;
  }
  for (uint32_t g = g0; g < g1; ++g) {
#pragma GCC unroll 2
    for (int h = 0; h < kSubs; ++h) {
      const uint32_t j = g * kSubs + h, k4 = g * 8 + h * kSteps;
      // Each sum starts at −corr: I = Σ − corr exactly (int32 never overflows here), one
      // subtraction per row instead of one per (row, vector).
      __m512i is[R][C];
      for (int r = 0; r < R; ++r) {
        const __m512i neg_corr = _mm512_set1_epi32(-cr[r][j]);
        for (int c = 0; c < C; ++c) is[r][c] = neg_corr;
      }
#pragma GCC unroll 8
      for (int st = 0; st < kSteps; ++st) {
        __m512i a[C];
        for (int c = 0; c < C; ++c) a[c] = _mm512_loadu_si512(xu[c] + size_t(k4 + st) * 64);
        for (int r = 0; r < R; ++r) {
          const __m512i wb = _mm512_set1_epi32(load_i32(wr[r] + size_t(k4 + st) * 4));
          for (int c = 0; c < C; ++c) is[r][c] = _mm512_dpbusd_epi32(is[r][c], a[c], wb);
        }
      }
      for (int c = 0; c < C; ++c) {
        const __m512 d = _mm512_loadu_ps(xd[c] + size_t(g) * 16);
        for (int r = 0; r < R; ++r) {
          const __m512 i = _mm512_cvtepi32_ps(is[r][c]),
                       dw = _mm512_mul_ps(d, _mm512_set1_ps(sr[r][j]));
          if constexpr (QFmt<Ty>::kMin) {  // acc += fma(I, d·ws, s·mw): the chain of kernels/qdot.h
            const __m512 sm = _mm512_mul_ps(_mm512_loadu_ps(xs[c] + size_t(g) * 16),
                                            _mm512_set1_ps(p.mw[size_t(i0 + r) * ng + g]));
            acc[r][c] = _mm512_add_ps(acc[r][c], _mm512_fmadd_ps(i, dw, sm));
          } else {
            acc[r][c] = _mm512_fmadd_ps(i, dw, acc[r][c]);
          }
        }
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(acc_io + (r * C + c) * 16, acc[r][c]);
}

template <GgmlType Ty>
KVZIP_VNNI void gemm_vnni(const QDotRowsArgs& a, const QActPack& x) {
  const MatrixView& w = *a.w;
  thread_local Panel panel;
  thread_local std::vector<float> buf;
  for (uint32_t p0 = a.r0; p0 < a.r1; p0 += kPanelRows) {
    const uint32_t np = std::min(kPanelRows, a.r1 - p0);
    decode_panel<Ty>(w, p0, np, panel);
    const TileSpan span{np,        x.nv, a.T,    w.cols / 32, even_chunk(w.cols / 32, kChunkGroups),
                        kTileVecs, a.y,  w.rows, p0};
    run_tiles(span, buf,
              [&](uint32_t v0, uint32_t C, uint32_t i0, uint32_t R, uint32_t g0, uint32_t g1,
                  float* acc) {
                with_rc<kTileVecs>(R, C, [&]<int Rv, int Cv>() {
                  micro<Ty, Rv, Cv>(panel, w.cols, x, v0, i0, g0, g1, acc);
                });
              });
  }
}

}  // namespace

namespace vnni_tiles {
#define KVZIP_QT_TARGET KVZIP_VNNI
#define KVZIP_QT_VNNI 1
#include "kernels/detail/qdot_tiles_x86.inc"
#undef KVZIP_QT_VNNI
#undef KVZIP_QT_TARGET
}  // namespace vnni_tiles

// Lane l of each output vector gathers token 16v + l's field: the Q8Act array is (T, in / 32)
// blocks of 40 bytes (d, s, q[32]), so a field of group g of token t is at byte
// 40·(t·ng + g) + off.
KVZIP_VNNI void pack_acts_vnni(const Q8Act* x, uint32_t T, uint32_t in, QActPack& out, PackOpts o) {
  static_assert(sizeof(Q8Act) == 40 && offsetof(Q8Act, d) == 0 && offsetof(Q8Act, s) == 4 &&
                offsetof(Q8Act, q) == 8);
  const uint32_t ng = in / 32, in4 = in / 4, nv = (T + 15) / 16;
  out.nv = nv, out.in = in;
  out.u.resize(size_t(nv) * in * 16);  // every lane is written below (padding lanes as zeros)
  out.d.resize(size_t(nv) * ng * 16);
  out.s.resize(size_t(nv) * ng * 16);
  const __m512i flip = _mm512_set1_epi8(o.offset128 ? char(0x80) : char(0));
  const int* base = reinterpret_cast<const int*>(x);  // 10 ints per block
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (uint32_t v = 0; v < nv; ++v) {
    const uint32_t n = std::min<uint32_t>(16, T - v * 16);
    const __mmask16 live = __mmask16((1u << n) - 1);
    // int offset of token 16v + l's block 0; padding lanes read nothing and take q = 0, d = s = 0.
    const __m512i tok = _mm512_mullo_epi32(_mm512_add_epi32(lane, _mm512_set1_epi32(int(v * 16))),
                                           _mm512_set1_epi32(int(ng * 10)));
    uint8_t* u = out.u.data() + size_t(v) * in4 * 64;
    for (uint32_t g = 0; g < ng; ++g) {
      const __m512i blk = _mm512_add_epi32(tok, _mm512_set1_epi32(int(g * 10)));
      const __m512i d = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, blk, base, 4);
      const __m512i sm = _mm512_mask_i32gather_epi32(
          _mm512_setzero_si512(), live, _mm512_add_epi32(blk, _mm512_set1_epi32(1)), base, 4);
      _mm512_storeu_si512(out.d.data() + (size_t(v) * ng + g) * 16, d);
      _mm512_storeu_si512(out.s.data() + (size_t(v) * ng + g) * 16, sm);
      for (int st = 0; st < 8; ++st) {
        const __m512i q =
            _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live,
                                        _mm512_add_epi32(blk, _mm512_set1_epi32(2 + st)), base, 4);
        _mm512_storeu_si512(u + (size_t(g) * 8 + st) * 64, _mm512_xor_si512(q, flip));  // q (+ 128)
      }
    }
  }
}

// nearbyint(v·id) clamped to ±127 (lambdas do not inherit the target attribute, so a function).
KVZIP_VNNI inline __m512i round_clamp_127(__m512 v, __m512 id) {
  const __m512 r =
      _mm512_roundscale_ps(_mm512_mul_ps(v, id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return _mm512_cvtps_epi32(
      _mm512_min_ps(_mm512_max_ps(r, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f)));
}

KVZIP_VNNI void quantize_acts_vnni(const float* x, size_t nblocks, Q8Act* out) {
  for (size_t k = 0; k < nblocks; ++k) {
    const __m512 a = _mm512_loadu_ps(x + k * 32), b = _mm512_loadu_ps(x + k * 32 + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
    // The scalar quantizer's arithmetic step for step (kernels/cpu/qdot.cc): same d, same
    // products, round to nearest even, the same clamp; so the same bytes.
    const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
    const __m512 vid = _mm512_set1_ps(id);
    const __m512i qa = round_clamp_127(a, vid), qb = round_clamp_127(b, vid);
    Q8Act& o = out[k];
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o.q), _mm512_cvtepi32_epi8(qa));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o.q + 16), _mm512_cvtepi32_epi8(qb));
    o.d = d;
    o.s = d * float(_mm512_reduce_add_epi32(_mm512_add_epi32(qa, qb)));
  }
}

namespace {
// Decode steps (T below the GEMM's, qdot.cc: one answer's token or a serving batch's) through
// the sixteen-row kernels where the type has one (one token: eight rows two blocks a step), the
// tiles' kernels for the rows past the last whole tile and for every other type: the
// same bits.
template <GgmlType Ty>
KVZIP_VNNI void rows_vnni(const QDotRowsArgs& a) {
  static const QDecodeFn decode16 = qdot_decode16_vnni(Ty);
  static const QDecodeFn decode8x2 = qdot_decode8x2_vnni(Ty);
  if (decode16) {
    QDotRowsArgs rest = a;
    rest.r0 = a.T == 1 && decode8x2 ? decode8x2(a) : decode16(a);
    if (rest.r0 < rest.r1) vnni_tiles::rows_tiles<Ty>(rest);
    return;
  }
  vnni_tiles::rows_tiles<Ty>(a);
}
}  // namespace

QDotFn qdot_rows_vnni(GgmlType t) {
  return pick_block_type<QDotFn>(t, [](auto T) -> QDotFn { return rows_vnni<decltype(T)::value>; });
}

QDotFn qdot_rows_vnni8(GgmlType t) {
  return pick_block_type<QDotFn>(
      t, [](auto T) -> QDotFn { return vnni_tiles::rows_tiles<decltype(T)::value>; });
}

QGemmFn qdot_gemm_vnni(GgmlType t) {
  return pick_block_type<QGemmFn>(t,
                                  [](auto T) -> QGemmFn { return gemm_vnni<decltype(T)::value>; });
}

#else  // no x86 variant in this build

bool cpu_has_avx512_vnni() { return false; }
QDotFn qdot_rows_vnni(quant::GgmlType) { return nullptr; }
QDotFn qdot_rows_vnni8(quant::GgmlType) { return nullptr; }
void pack_acts_vnni(const Q8Act*, uint32_t, uint32_t, QActPack&, PackOpts) {
  throw Error(Errc::internal, "pack_acts_vnni: not built for this CPU");
}
void quantize_acts_vnni(const float*, size_t, Q8Act*) {
  throw Error(Errc::internal, "quantize_acts_vnni: not built for this CPU");
}
QGemmFn qdot_gemm_vnni(quant::GgmlType) { return nullptr; }

#endif

}  // namespace kvzip::kernels::cpu::detail
