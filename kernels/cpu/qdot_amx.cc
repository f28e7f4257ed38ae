// AMX-INT8 GEMM of the 8-bit-activation product (kernels/qdot.h), from kQdotAmxMinT tokens on
// CPUs with AMX-TILE and AMX-INT8 (Intel Xeon from Sapphire Rapids). It runs the one chain of
// kernels/qdot.h: per 32-element group (Q6_K: 16-element half) the exact int32 sum Σ w_int·q_x of
// 16 rows x 16 tokens from one tdpbssd, then the group's fp32 step with AVX-512 in group order,
// so a token's result has the scalar reference's bits, whatever T or the batch (tested bitwise).
//
// Layout (why it is shaped so): tdpbssd multiplies signed bytes by signed bytes, C[m][n] +=
// Σ_k A[m][k]·B[k/4][4n + k%4]. A is 16 weight rows x one group, read from the panel the VNNI
// GEMM decodes (kernels/detail/qdot_panel_x86.h: element order, a row's stride apart; every
// type's integers fit a signed byte); B is one group of 16 tokens in the VNNI GEMM's activation
// pack, signed (kAmxPack: q, not q + 128, so no offset to take back). C is (row, token), the
// layout of the VNNI GEMM's vectors, and the fp32 step is that GEMM's, operand for operand.
// Integer sums cannot run over two groups (each has its own scales), so a tile holds one group's
// K (32 bytes; 16 for Q6_K) and every group's C goes through memory to the fp32 step.
//
// Pipelining: the tile work of step j (tiles A0, B2, C4 for even steps; A1, B3, C6 for odd)
// is issued before the fp32 step of j − 1, whose sums wait in the other of two 1 KB buffers. The
// chain's fp32 step makes the kernel: measured, the tile work alone runs at about 1.4x the whole,
// and the tile unit itself at ~18x, so the fp32 steps set the pace and the tiles hide behind them.
//
// Blocking: a task (kernels::cpu::qdot: 32 rows) decodes its rows once, then for each 16-token
// vector and each 16-row half runs every step with the 16 accumulators (one per row, lanes =
// tokens) in registers, and writes them to y (T, out) through a gather per token. Lanes past T
// are zeros, rows past the panel's zero weights, and neither is written to y.
// Linux hands a process the 8 KB tile state only on request (arch_prctl ARCH_REQ_XCOMP_PERM);
// cpu_has_amx asks once (for this GEMM and the AMX-BF16 one) and reports AMX absent where it is
// refused.
#include <algorithm>
#include <cstddef>
#include <cstring>

#include "common/error.h"

#include "kernels/detail/qdot_panel_x86.h"

#if KVZIP_QDOT_X86 && defined(__linux__)
#define KVZIP_QDOT_AMX 1
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define KVZIP_AMX \
  __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#endif

namespace kvzip::kernels::cpu::detail {

#if KVZIP_QDOT_AMX

// CPUID leaf 7 EDX bit 24 is AMX-TILE, 22 AMX-BF16, 25 AMX-INT8; the tile state is granted once
// per process.
bool cpu_has_amx(AmxUnit unit) {
  static const unsigned edx = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !((d >> 24) & 1u)) return 0u;
    constexpr long kReqXcompPerm = 0x1023, kXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtiledata) == 0 ? d : 0u;
  }();
  return (edx >> (unit == AmxUnit::Int8 ? 25 : 22)) & 1u;
}

bool cpu_has_amx_int8() { return cpu_has_avx512_vnni() && cpu_has_amx(AmxUnit::Int8); }

namespace {

using quant::GgmlType;
using x86::decode_panel;
using x86::kSubElems;
using x86::Panel;

constexpr uint32_t kBlk = 16;  // rows per A/C tile, tokens per B/C tile

// Palette 1: A 0-1 (16 rows x kSub bytes), B 2-3 (kSub / 4 rows x 16 tokens' four bytes),
// C 4 and 6 (16 rows x 16 tokens of int32; 5 and 7 unused).
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

template <int kSub>
KVZIP_AMX void load_config() {
  TileConfig cfg;
  for (int t = 0; t < 2; ++t) cfg.colsb[t] = kSub, cfg.rows[t] = kBlk;
  for (int t = 2; t < 4; ++t) cfg.colsb[t] = 64, cfg.rows[t] = kSub / 4;
  for (int t = 4; t < 8; ++t) cfg.colsb[t] = 64, cfg.rows[t] = kBlk;
  _tile_loadconfig(&cfg);
}

// The panel's scales per step for the 16-row halves, so a step's 16 broadcasts share a line:
// ws (nsub, 32) and mw (ng, 32), column = panel row.
struct StepScales {
  std::vector<float> ws, mw;
};

// What one pass (16 panel rows from i0, token vector v0) reads.
struct Pass {
  const Panel* p;
  const StepScales* sc;
  const QActPack* x;
  uint32_t in, ng, nsub, i0, v0;  // rows i0..i0 + 15 of the panel, token vector v0
};

// acc (16 rows; lanes: 16 tokens) += step j's fp32 step on its sums ib (16 rows, 16 tokens):
// per (row, 16 tokens) the chain of kernels/qdot.h, as the VNNI GEMM forms it. acc stays in
// registers for the whole pass (the caller's loop is one function once this is inlined).
template <GgmlType Ty>
KVZIP_AMX inline void fp32_step(const Pass& s, uint32_t j, const int32_t (*ib)[kBlk],
                                __m512 (&acc)[kBlk]) {
  constexpr int kSubs = 32 / kSubElems<Ty>;
  const uint32_t g = j / kSubs;
  const size_t at = (size_t(s.v0) * s.ng + g) * 16;
  const __m512 d = _mm512_loadu_ps(s.x->d.data() + at);
  const __m512 xs = _mm512_loadu_ps(s.x->s.data() + at);
  const float* ws = s.sc->ws.data() + size_t(j) * 2 * kBlk + s.i0;
  const float* mw = QFmt<Ty>::kMin ? s.sc->mw.data() + size_t(g) * 2 * kBlk + s.i0 : nullptr;
#pragma GCC unroll 16
  for (uint32_t m = 0; m < kBlk; ++m) {
    const __m512 i = _mm512_cvtepi32_ps(_mm512_load_si512(ib[m]));
    const __m512 dw = _mm512_mul_ps(d, _mm512_set1_ps(ws[m]));
    if constexpr (QFmt<Ty>::kMin) {  // acc += fma(I, d·ws, s·mw)
      acc[m] =
          _mm512_add_ps(acc[m], _mm512_fmadd_ps(i, dw, _mm512_mul_ps(xs, _mm512_set1_ps(mw[m]))));
    } else {
      acc[m] = _mm512_fmadd_ps(i, dw, acc[m]);
    }
  }
}

// Step j's tile work into C tile C from A tile TA and B tile TB: 16 rows x 16 tokens. GCC's
// tile intrinsics paste the tile number into the instruction text, so the numbers are literals
// and the two tile sets are two functions.
#define KVZIP_AMX_TILE_STEP(name, TA, TB, C)                                                      \
  template <int kSub>                                                                             \
  KVZIP_AMX inline void name(const Pass& s, uint32_t j, int32_t(*ib)[kBlk]) {                     \
    const uint8_t* b = s.x->u.data() + (size_t(s.v0) * (s.in / 4) + size_t(j) * (kSub / 4)) * 64; \
    _tile_zero(C);                                                                                \
    _tile_loadd(TA, s.p->w.data() + size_t(s.i0) * s.p->stride + size_t(j) * kSub, s.p->stride);  \
    _tile_loadd(TB, b, 64);                                                                       \
    _tile_dpbssd(C, TA, TB);                                                                      \
    _tile_stored(C, ib, 64);                                                                      \
  }
KVZIP_AMX_TILE_STEP(tile_step_even, 0, 2, 4)
KVZIP_AMX_TILE_STEP(tile_step_odd, 1, 3, 6)
#undef KVZIP_AMX_TILE_STEP

template <GgmlType Ty>
KVZIP_AMX void gemm_amx(const QDotRowsArgs& a, const QActPack& x) {
  constexpr int kSub = kSubElems<Ty>;
  const MatrixView& w = *a.w;
  const uint32_t in = w.cols, ng = in / 32, nsub = in / kSub;
  load_config<kSub>();
  thread_local Panel panel;
  thread_local StepScales sc;
  alignas(64) int32_t ib[2][kBlk][kBlk];  // [step parity][row][token]
  const __m512i col =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(kBlk));
  for (uint32_t p0 = a.r0; p0 < a.r1; p0 += 2 * kBlk) {
    const uint32_t np = std::min(2 * kBlk, a.r1 - p0);
    decode_panel<Ty>(w, p0, np, panel);
    panel.w.resize(size_t(2) * kBlk * panel.stride);  // zero rows up to the A tiles' 32
    sc.ws.assign(size_t(nsub) * 2 * kBlk, 0.0f);
    sc.mw.assign(QFmt<Ty>::kMin ? size_t(ng) * 2 * kBlk : 0, 0.0f);
    for (uint32_t r = 0; r < np; ++r) {
      for (uint32_t j = 0; j < nsub; ++j)
        sc.ws[size_t(j) * 2 * kBlk + r] = panel.ws[size_t(r) * nsub + j];
      if constexpr (QFmt<Ty>::kMin)
        for (uint32_t g = 0; g < ng; ++g)
          sc.mw[size_t(g) * 2 * kBlk + r] = panel.mw[size_t(r) * ng + g];
    }
    // Both halves of the panel take a vector's tokens in turn: its in bytes of pack are read
    // from memory once, then from L1/L2.
    for (uint32_t v = 0; v < x.nv; ++v) {
      for (uint32_t i0 = 0; i0 < np; i0 += kBlk) {
        const Pass s{&panel, &sc, &x, in, ng, nsub, i0, v};
        __m512 acc[kBlk];
        for (uint32_t m = 0; m < kBlk; ++m) acc[m] = _mm512_setzero_ps();  // the chain starts at 0
        // Steps in pairs, even on tiles (A0, B2, C4), odd on (A1, B3, C6); each pair's fp32
        // work is the step before it, so the vector units never wait on the step the AMX unit
        // is in.
        for (uint32_t j = 0; j < nsub; j += 2) {
          tile_step_even<kSub>(s, j, ib[0]);
          if (j > 0) fp32_step<Ty>(s, j - 1, ib[1], acc);
          if (j + 1 < nsub) tile_step_odd<kSub>(s, j + 1, ib[1]);
          fp32_step<Ty>(s, j, ib[0], acc);
        }
        if (nsub % 2 == 0) fp32_step<Ty>(s, nsub - 1, ib[1], acc);
        // acc is (row; token lanes); y is (token, row): through a 1 KB buffer, one gather of a
        // token's 16 rows and one store per token.
        alignas(64) float out[kBlk][kBlk];
        for (uint32_t m = 0; m < kBlk; ++m) _mm512_store_ps(out[m], acc[m]);
        const uint32_t live = std::min(kBlk, np - i0);
        const __mmask16 rows = __mmask16((1u << live) - 1);
        for (uint32_t l = 0; l < kBlk; ++l) {
          const uint32_t t = v * kBlk + l;
          if (t >= a.T) break;
          _mm512_mask_storeu_ps(a.y + size_t(t) * w.rows + p0 + i0, rows,
                                _mm512_i32gather_ps(col, &out[0][l], 4));
        }
      }
    }
  }
  _tile_release();
}

}  // namespace

QGemmFn qdot_gemm_amx(GgmlType t) {
  return pick_block_type<QGemmFn>(t,
                                  [](auto T) -> QGemmFn { return gemm_amx<decltype(T)::value>; });
}

#else  // no AMX variant in this build

bool cpu_has_amx(AmxUnit) { return false; }
bool cpu_has_amx_int8() { return false; }
QGemmFn qdot_gemm_amx(quant::GgmlType) { return nullptr; }

#endif

}  // namespace kvzip::kernels::cpu::detail
