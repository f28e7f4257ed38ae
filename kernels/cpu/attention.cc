// CPU causal GQA attention (see kernels/attention.h for the contract). A task takes one KV head,
// a block of query tokens (all G query heads of the group, so the G heads share every key block
// loaded) and a chunk of keys. K is transposed so S = Q·K^T vectorises over keys: once per call
// into shared tiles when several query blocks reuse them (prefill), else by each task for its own
// key block (decode, short appends: every key is read once, so a separate pass would only add
// memory traffic), unless the span holds them transposed already (KvSpan::kt: a loaded base's keys,
// made once by transpose_key_tiles). Per key block of kBk rows the online-softmax state
// (m, l, acc) of each query row is updated and acc += P·V vectorises over D. Keys are split into
// chunks only when there are too few (head, query block) tasks to occupy the threads (decode, short
// appends over a long cache); the chunks' partial states are then merged exactly (log-sum-exp).
// A call with one block of query rows (a decode step's heads) walks K's tiles and V's rows in
// memory order instead (row_times), over its real rows only: its data is read once from memory.
// Local statistics (AttentionArgs::local): a task visits its keys as segments that never cross a
// kBk tile, the local rows first (prefix, target, own); after them each row's (m, l) IS its local
// softmax normaliser, and the target rows' logits, kept from their segments, give the max local
// probability per target row. Then the other rows follow (skipped when only statistics are asked).
// Two-segment spans (KvSpan::k_tail): keys are read row by row through k_row/v_row, and a key
// block that straddles the segments has its V rows gathered into the padded block, so the blocks,
// and therefore every sum, are those of one contiguous copy of the rows.
// attention_many runs several calls' tasks in one pass of the pool; each call keeps the plan
// (blocks, key splits) it gets alone, so each result is the one it gets alone.
// Spans with quantized rows (KvSpan::quant) go to attention_quantized (attention_quant.cc), which
// runs this kernel on their f32 rows with each query row's log-sum-exp as an extra output.
// bf16 products (AttentionArgs::bf16, 16-lane build on a CPU with AVX-512 BF16): the shared key
// tiles are also kept as bf16 pairs (two consecutive dimensions of a key per dword), V as pairs of
// consecutive rows, and each task's queries and each block's probabilities are rounded the same
// way, so S and P·V each take half the instructions (vdpbf16ps: 32 multiply-adds against an fp32
// FMA's 16); the softmax stays fp32.
// This file is compiled twice: for the build's vector width (namespace cpu::base) and, included by
// attention_avx512.cc under an AVX-512 target, for 16 lanes (cpu::avx512); attention_isa.cc
// dispatches by the CPU (kernels/detail/attention_isa.h).
#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <span>
#include <type_traits>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "common/error.h"
#include "kernels/detail/attention_cpu.h"
#include "kernels/detail/attention_isa.h"
#include "kernels/detail/bf16_gemm.h"
#include "kernels/simd.h"
#include "kernels/thread_pool.h"

#ifndef KVZIP_ATTENTION_ISA
#define KVZIP_ATTENTION_ISA base
#endif

namespace kvzip::kernels::cpu::KVZIP_ATTENTION_ISA {
namespace {

using simd::kLanes;
using simd::VecF;

constexpr uint32_t kBk = kKeyTileRows;    // keys per block; a multiple of kQkCols
constexpr uint32_t kRowsTarget = 64;      // query rows (tokens × group heads) per task
constexpr float kNegligible = -80.0f;     // softmax_row: logits this far below the max weigh 0
constexpr uint32_t kQkRows = 4;           // rows of one S micro-tile (also the P·V row step)
constexpr uint32_t kQkCols = 2 * kLanes;  // columns of one S micro-tile
constexpr uint32_t kPvVecs = kLanes == 16 ? 4 : 2;  // D-vectors per P·V micro-tile

uint32_t round_up(uint32_t x, uint32_t m) { return (x + m - 1) / m * m; }

// Wide heads on 8 lanes (D >= 128: Llama 3 8B, Mistral 7B, Qwen2.5 from 1.5B, Qwen 3, Gemma 3;
// SmolLM2 and Llama 3.2 1B have D = 64): twice kRowsTarget rows a task, so each key and value strip
// brought into L1 serves twice the rows, and q·k in 6-row tiles (twelve accumulator chains), which
// pay only beside the doubled rows (bench/ab/attention_ab.sh). At D = 64 a block's keys already fit
// L1 and neither pays, so those heads keep 64 rows and 4-row tiles. Neither changes an element's
// chain: the same bits.
constexpr bool wide_heads(uint32_t D) { return kLanes == 8 && D >= 128; }

#if defined(KVZIP_SIMD_AVX512)
#define KVZIP_ATTENTION_BF16 1
#define KVZIP_BF16_FN __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")))
#else
#define KVZIP_ATTENTION_BF16 0
#endif

// K of every KV head transposed, shared read-only by all tasks of one call, stored as tiles of
// kBk keys: tile b of head h is (D, kBk) and holds keys [b·kBk, (b+1)·kBk). One tile per block
// keeps the rows the S micro-kernel walks close together (a (D, len) layout with a long
// power-of-two stride thrashes the L1 sets).
// A tile the span already holds (KvSpan::kt, the same values) is read from there instead.
struct KeysT {
  const float* data = nullptr;  // (Hkv, n_tiles, D, kBk); columns at or beyond len_h are zero
  uint32_t n_tiles = 0;
  // With bf16 products: K as (Hkv, n_tiles, D / 2, kBk) dwords, dword (p, c) = dims 2p, 2p + 1 of
  // key c (low half first); V as (Hkv, n_tiles, kBk / 2, D) dwords, dword (p, d) = dim d of rows
  // 2p, 2p + 1 of the tile. Rows at or beyond len_h are zero.
  const uint32_t* k16 = nullptr;
  const uint32_t* v16 = nullptr;
  const KvSpan* kv = nullptr;  // (Hkv) the call's spans
  static bool premade(const KvSpan& s, uint32_t b) { return (b + 1) * kBk <= s.kt_rows; }
  const float* tile(uint32_t h, uint32_t b, uint32_t D) const {
    if (premade(kv[h], b)) return kv[h].kt + size_t(b) * D * kBk;
    return data + (size_t(h) * n_tiles + b) * D * kBk;
  }
};

// Geometry shared by every task of one call.
struct Plan {
  const AttentionArgs* a = nullptr;
  uint32_t G = 0;     // query heads per KV head
  uint32_t Dp = 0;    // D rounded up to whole vectors
  uint32_t Bq = 0;    // query tokens per block
  uint32_t Rmax = 0;  // round_up(Bq * G, kQkRows)
  uint32_t n_qblocks = 0;
  uint32_t n_split = 1;  // key chunks per (head, query block)
  KeysT kt;
  bool two_segments = false;            // some span has a tail (V blocks may need gathering)
  const LocalMaxProb* local = nullptr;  // AttentionArgs::local
  uint32_t n_target = 0;                // local->target_end - local->target_begin
  std::mutex* locks = nullptr;          // (Hkv) guard local->out's rows
  float* lse = nullptr;                 // (T, Hq) or null: log Σ exp(logits) of each query row
  bool bf16 = false;                    // products on bf16 pairs (kt.k16, kt.v16)
};

// Per-thread scratch, grown once and reused.
struct Scratch {
  std::vector<float> q;   // (Rmax, Dp) scaled queries, zero padded
  std::vector<float> kt;  // (D, kBk) this task's transposed key block (when tiles are not shared)
  std::vector<float> v;   // (kBk, Dp) value block, zero padded (only when D % kLanes != 0)
  std::vector<float> s;   // (Rmax, kBk) scores, then probabilities
  std::vector<uint32_t> limit;  // (Rmax) rows each query row may see (0: a padding row)
  uint32_t rows = 0;            // the task's query rows; the rest up to a multiple of kQkRows pad
  std::vector<uint32_t> first;  // (Rmax) first row it may see (a sliding window; else 0)
  std::vector<uint32_t> jmax;   // (Rmax / kQkRows) keys each row step's P·V takes in a block
  std::vector<float> tl;        // (Rmax, n_target) the rows' logits against the target keys
  std::vector<float> best;      // (n_target) max over the task's rows of the local log-probability
  std::vector<uint32_t> q16;    // (Rmax, D / 2) the scaled queries as bf16 pairs (bf16 products)
  std::vector<uint32_t> p16;    // (kQkRows, kBk / 2 + 1) a row step's probabilities as pairs
  std::vector<float> prow;      // (kBk + 2) one probability row, shifted to the pairs' parity
  void fit(const Plan& p) {
    const uint32_t D = p.a->D;
    q.resize(size_t(p.Rmax) * p.Dp);
    if (!p.kt.data) kt.resize(size_t(D) * kBk);
    if (D != p.Dp || p.two_segments) v.resize(size_t(kBk) * p.Dp);
    s.resize(size_t(p.Rmax) * kBk);
    limit.resize(p.Rmax);
    first.resize(p.Rmax);
    jmax.resize(p.Rmax / kQkRows);
    if (p.local) {
      tl.resize(size_t(p.Rmax) * p.n_target);
      best.resize(p.n_target);
    }
    if (p.bf16) {
      q16.resize(size_t(p.Rmax) * (D / 2));
      p16.resize(size_t(kQkRows) * (kBk / 2 + 1));
      prow.resize(kBk + 2);
    }
  }
};
thread_local Scratch tl_scratch;

// Online-softmax state of a task's rows: m (running max), l (running sum), acc (Rmax, Dp).
struct RowState {
  float* m;
  float* l;
  float* acc;
};

// acc[0, NV vectors) += Σ_i x[i] · M[i·ld, +NV vectors) over i < n, in order: one row of X·M
// walking M's rows in memory order, NV accumulator chains; with kZero the sum starts from 0, not
// from acc. A decode step's q·k (x a query, M a key tile: each of its rows one key dimension) and
// P·V (x probabilities, M V rows) use it where the prefill micro-tiles would read a strip of
// every row per pass — strided runs over data a decode step reads once from memory, where one
// sequential run keeps the hardware prefetchers ahead of the loads. Later query rows find M in L1.
// Each element is the micro-tiles' chain (the same order over i), so the same bits.
template <uint32_t NV, bool kZero>
void row_times(const float* x, uint32_t n, const float* m, size_t ld, float* acc) {
  VecF a[NV];
  for (uint32_t v = 0; v < NV; ++v) a[v] = kZero ? VecF{} : simd::load(acc + v * kLanes);
  for (uint32_t i = 0; i < n; ++i) {
    const VecF xv = simd::splat(x[i]);
    for (uint32_t v = 0; v < NV; ++v) a[v] += xv * simd::load(m + i * ld + v * kLanes);
  }
  for (uint32_t v = 0; v < NV; ++v) simd::store(acc + v * kLanes, a[v]);
}

constexpr uint32_t kWalkVecs = 8;  // vectors a row_times walk: 8 chains; 64 or 128 floats

// row_times over nv vectors (1 to kWalkVecs).
template <bool kZero>
void row_times_n(uint32_t nv, const float* x, uint32_t n, const float* m, size_t ld, float* acc) {
  switch (nv) {
    case 1: return row_times<1, kZero>(x, n, m, ld, acc);
    case 2: return row_times<2, kZero>(x, n, m, ld, acc);
    case 3: return row_times<3, kZero>(x, n, m, ld, acc);
    case 4: return row_times<4, kZero>(x, n, m, ld, acc);
    case 5: return row_times<5, kZero>(x, n, m, ld, acc);
    case 6: return row_times<6, kZero>(x, n, m, ld, acc);
    case 7: return row_times<7, kZero>(x, n, m, ld, acc);
    default: return row_times<kWalkVecs, kZero>(x, n, m, ld, acc);
  }
}

// R rows from r of S, one kQkCols-column micro-tile from c: each element one chain over d.
template <uint32_t R>
inline void scores_tile(const float* q, const float* kt, size_t ldk, float* s, uint32_t r,
                        uint32_t c, uint32_t D, uint32_t Dp) {
  VecF acc[R][2] = {};
  for (uint32_t d = 0; d < D; ++d) {
    VecF k0 = simd::load(kt + d * ldk + c);
    VecF k1 = simd::load(kt + d * ldk + c + kLanes);
    simd::pin(k0);
    simd::pin(k1);
    for (uint32_t i = 0; i < R; ++i) {
      VecF qv = simd::splat(q[size_t(r + i) * Dp + d]);
      acc[i][0] += qv * k0;
      acc[i][1] += qv * k1;
    }
  }
  for (uint32_t i = 0; i < R; ++i) {
    simd::store(s + size_t(r + i) * kBk + c, acc[i][0]);
    simd::store(s + size_t(r + i) * kBk + c + kLanes, acc[i][1]);
  }
}

// S(Rp, ncols) = Q(Rp, D) · Kt(D, ncols) with Kt's rows ldk apart; Rp a multiple of kQkRows,
// ncols of kQkCols. (An 8-row tile measured no faster; 6-row ones: wide_heads.) Column
// strip outer, row steps inner: one strip of Kt (kQkCols keys of every dimension: 4 KiB at D = 64,
// 8 KiB at D = 128 on 8 lanes) serves all the row steps from L1, where a row step at a time would
// walk the whole tile (32 / 64 KiB). One block of rows (a decode step's query heads) is walked row
// by row in memory order (row_times: one sequential run a row; two rows a walk measured no
// faster), its first R rows only: the others pad the block (a group of 3 heads, or 2), and no one
// reads their scores.
void scores(const float* q, const float* kt, size_t ldk, float* s, uint32_t Rp, uint32_t R,
            uint32_t ncols, uint32_t D, uint32_t Dp) {
  if (Rp == kQkRows) {
    for (uint32_t r = 0; r < R; ++r)
      for (uint32_t c = 0; c < ncols; c += kWalkVecs * kLanes)
        row_times_n<true>(std::min(kWalkVecs, (ncols - c) / kLanes), q + size_t(r) * Dp, D, kt + c,
                          ldk, s + size_t(r) * kBk + c);
    return;
  }
  for (uint32_t c = 0; c < ncols; c += kQkCols) {
    uint32_t r = 0;  // Rp is a multiple of kQkRows (4): 6-row tiles where they pay, then 4, then 2
    if (wide_heads(D))
      for (; r + 6 <= Rp; r += 6) scores_tile<6>(q, kt, ldk, s, r, c, D, Dp);
    for (; r + kQkRows <= Rp; r += kQkRows) scores_tile<kQkRows>(q, kt, ldk, s, r, c, D, Dp);
    for (; r < Rp; r += 2) scores_tile<2>(q, kt, ldk, s, r, c, D, Dp);
  }
}

// acc(kQkRows rows from r, NV vectors from column dc) += P(rows, 0..jmax) · V(0..jmax, cols).
template <uint32_t NV>
void pv_tile(const float* p, const float* v, size_t ldv, float* acc, uint32_t r, uint32_t dc,
             uint32_t jmax, uint32_t Dp) {
  VecF a[kQkRows][NV];
  for (uint32_t i = 0; i < kQkRows; ++i)
    for (uint32_t n = 0; n < NV; ++n)
      a[i][n] = simd::load(acc + size_t(r + i) * Dp + dc + n * kLanes);
  for (uint32_t j = 0; j < jmax; ++j) {
    VecF vv[NV];
    for (uint32_t n = 0; n < NV; ++n) {
      vv[n] = simd::load(v + j * ldv + dc + n * kLanes);
      simd::pin(vv[n]);
    }
    for (uint32_t i = 0; i < kQkRows; ++i) {
      VecF pv = simd::splat(p[size_t(r + i) * kBk + j]);
      for (uint32_t n = 0; n < NV; ++n) a[i][n] += pv * vv[n];
    }
  }
  for (uint32_t i = 0; i < kQkRows; ++i)
    for (uint32_t n = 0; n < NV; ++n)
      simd::store(acc + size_t(r + i) * Dp + dc + n * kLanes, a[i][n]);
}

// acc += P·V for the row steps (kQkRows rows each) up to Rp whose jmax[step] is not 0
// (the keys that step's rows see), V's rows ldv apart with Dp readable floats each. Strip by strip
// of V's columns, every row step per strip: one strip of the block's V rows stays in L1 for all
// the steps (the whole block is 32 KiB at D = 64, 64 KiB at D = 128; L1 is 32-48 KiB). On 8
// lanes strips of three vectors first (twelve accumulators: with the three V vectors and the
// broadcast all 16 registers, each V load feeding four FMAs against two vectors' 2.67), then two.
// Each element is the same chain over j whatever the strips.
void pv_steps(const float* p, const float* v, size_t ldv, float* acc, uint32_t Rp,
              const uint32_t* jmax, uint32_t Dp) {
  auto strip = [&](auto nv, uint32_t dc) {
    for (uint32_t r = 0; r < Rp; r += kQkRows)
      if (const uint32_t j = jmax[r / kQkRows])
        pv_tile<decltype(nv)::value>(p, v, ldv, acc, r, dc, j, Dp);
  };
  uint32_t dc = 0;
  if constexpr (kLanes == 8) {
    for (; dc + 3 * kLanes <= Dp; dc += 3 * kLanes)
      strip(std::integral_constant<uint32_t, 3>{}, dc);
    for (; dc + 2 * kLanes <= Dp; dc += 2 * kLanes)
      strip(std::integral_constant<uint32_t, 2>{}, dc);
  }
  for (; dc + kPvVecs * kLanes <= Dp; dc += kPvVecs * kLanes)
    strip(std::integral_constant<uint32_t, kPvVecs>{}, dc);
  for (; dc < Dp; dc += kLanes) strip(std::integral_constant<uint32_t, 1>{}, dc);
}

// pv_steps for the call's only block of rows (a decode step's heads), which reads the block's V
// once from memory: where a V row is more than one pv_tile pass wide (8 lanes, or D = 128 and up
// on 16), each of its first R rows of P walks V in memory order (row_times) rather than in strips
// (the rest pad the block). Each element is the same chain over j either way.
void pv_walk(const float* p, const float* v, size_t ldv, float* acc, uint32_t jmax, uint32_t Dp,
             uint32_t R) {
  if (Dp > kPvVecs * kLanes) {
    for (uint32_t i = 0; i < std::min(kQkRows, R); ++i)
      for (uint32_t dc = 0; dc < Dp; dc += kWalkVecs * kLanes)
        row_times_n<false>(std::min(kWalkVecs, (Dp - dc) / kLanes), p + size_t(i) * kBk, jmax,
                           v + dc, ldv, acc + size_t(i) * Dp + dc);
    return;
  }
  pv_steps(p, v, ldv, acc, kQkRows, &jmax, Dp);
}

#if KVZIP_ATTENTION_BF16
// bf16 operands are rounded to nearest even from fp32 (finite values: attention's are).
inline uint32_t bf16_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
}

// Each lane of x rounded to bf16, in the lane's high half (low half zero).
KVZIP_BF16_FN inline __m512i bf16_high(__m512 x) {
  const __m512i b = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(0x7fff)), lsb);
  return _mm512_and_si512(r, _mm512_set1_epi32(int(0xffff0000u)));
}

// Lane i: bf16(a[i]) in the low half, bf16(b[i]) in the high half.
KVZIP_BF16_FN inline __m512i bf16_pair(__m512 a, __m512 b) {
  return _mm512_or_si512(_mm512_srli_epi32(bf16_high(a), 16), bf16_high(b));
}

// dst[k] = the pair (x[2k], x[2k + 1]) for k < n2.
KVZIP_BF16_FN void pairs_of(const float* x, uint32_t n2, uint32_t* dst) {
  uint32_t k = 0;
  for (; k + 8 <= n2; k += 8) {
    // 64-bit lane L holds bf16(x[2L]) << 16 and bf16(x[2L + 1]) << 48: the pair is the low dword
    // shifted down by 16 or'ed with the high dword (the lane shifted down by 32).
    const __m512i r = bf16_high(_mm512_loadu_ps(x + 2 * k));
    const __m512i pr = _mm512_or_si512(_mm512_srli_epi32(r, 16), _mm512_srli_epi64(r, 32));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + k), _mm512_cvtepi64_epi32(pr));
  }
  for (; k < n2; ++k) dst[k] = bf16_bits(x[2 * k]) | (bf16_bits(x[2 * k + 1]) << 16);
}

// pairs_of for probabilities, by vcvtne2ps2bf16 (one instruction per 32 values against pairs_of's
// nine per 16): rounded to nearest even as bf16_bits, except that fp32 denormals become 0 — which
// vdpbf16ps, their only reader, makes of bf16 denormals anyway, so the products are the same.
KVZIP_BF16_FN void probability_pairs(const float* x, uint32_t n2, uint32_t* dst) {
  uint32_t k = 0;
  for (; k + 16 <= n2; k += 16)
    _mm512_storeu_si512(dst + k, (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + 2 * k + 16),
                                                              _mm512_loadu_ps(x + 2 * k)));
  if (k < n2) {  // fewer than 16 pairs left: masked loads and store
    const uint32_t n = 2 * (n2 - k);
    const uint32_t lo = n >= 16 ? 16 : n, hi = n - lo;
    const __m512 a = _mm512_maskz_loadu_ps(__mmask16((1u << lo) - 1), x + 2 * k);
    const __m512 b = _mm512_maskz_loadu_ps(__mmask16((1u << hi) - 1), x + 2 * k + 16);
    _mm512_mask_storeu_epi32(dst + k, __mmask16((1u << (n2 - k)) - 1),
                             (__m512i)_mm512_cvtne2ps_pbh(b, a));
  }
}

// R rows from r of scores_bf16's S, one kQkCols-column micro-tile from c.
template <uint32_t R>
KVZIP_BF16_FN inline void scores_bf16_tile(const uint32_t* q16, const uint32_t* kt, size_t ldk,
                                           float* s, uint32_t r, uint32_t c, uint32_t D2) {
  __m512 acc[R][2];
  for (uint32_t i = 0; i < R; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (uint32_t d = 0; d < D2; ++d) {
    const __m512i k0 = _mm512_loadu_si512(kt + d * ldk + c);
    const __m512i k1 = _mm512_loadu_si512(kt + d * ldk + c + 16);
    for (uint32_t i = 0; i < R; ++i) {
      const __m512i qv = _mm512_set1_epi32(int(q16[size_t(r + i) * D2 + d]));
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], (__m512bh)qv, (__m512bh)k0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], (__m512bh)qv, (__m512bh)k1);
    }
  }
  for (uint32_t i = 0; i < R; ++i) {
    _mm512_storeu_ps(s + size_t(r + i) * kBk + c, acc[i][0]);
    _mm512_storeu_ps(s + size_t(r + i) * kBk + c + 16, acc[i][1]);
  }
}

// scores() on pairs: S(Rp, ncols) = Q16(Rp, D2) · K16(D2, ncols), K16's rows ldk dwords apart.
// Eight rows a micro-tile where they are there: sixteen accumulator chains, where four rows' eight
// leave vdpbf16ps waiting on its own latency. Each element is one chain over d either way.
KVZIP_BF16_FN void scores_bf16(const uint32_t* q16, const uint32_t* kt, size_t ldk, float* s,
                               uint32_t Rp, uint32_t ncols, uint32_t D2) {
  uint32_t r = 0;
  for (; r + 2 * kQkRows <= Rp; r += 2 * kQkRows)
    for (uint32_t c = 0; c < ncols; c += kQkCols)
      scores_bf16_tile<2 * kQkRows>(q16, kt, ldk, s, r, c, D2);
  for (; r < Rp; r += kQkRows)
    for (uint32_t c = 0; c < ncols; c += kQkCols)
      scores_bf16_tile<kQkRows>(q16, kt, ldk, s, r, c, D2);
}

// acc(kQkRows rows from r, NV vectors from column dc) += P16(rows, np pairs) · V16(np pairs, cols);
// P16's rows ldp dwords apart, V16's rows D dwords.
template <uint32_t NV>
KVZIP_BF16_FN void pv_tile_bf16(const uint32_t* p16, uint32_t ldp, const uint32_t* v16, float* acc,
                                uint32_t r, uint32_t dc, uint32_t np, uint32_t D) {
  __m512 a[kQkRows][NV];
  for (uint32_t i = 0; i < kQkRows; ++i)
    for (uint32_t n = 0; n < NV; ++n)
      a[i][n] = _mm512_loadu_ps(acc + size_t(r + i) * D + dc + n * 16);
  for (uint32_t j = 0; j < np; ++j) {
    __m512i vv[NV];
    for (uint32_t n = 0; n < NV; ++n) vv[n] = _mm512_loadu_si512(v16 + size_t(j) * D + dc + n * 16);
    for (uint32_t i = 0; i < kQkRows; ++i) {
      const __m512i pv = _mm512_set1_epi32(int(p16[i * ldp + j]));
      for (uint32_t n = 0; n < NV; ++n)
        a[i][n] = _mm512_dpbf16_ps(a[i][n], (__m512bh)pv, (__m512bh)vv[n]);
    }
  }
  for (uint32_t i = 0; i < kQkRows; ++i)
    for (uint32_t n = 0; n < NV; ++n)
      _mm512_storeu_ps(acc + size_t(r + i) * D + dc + n * 16, a[i][n]);
}

// The bf16 tiles of tile b of head h from its fp32 key tile t (D, kBk) and its V rows [j0, j0 + n).
KVZIP_BF16_FN void make_bf16_tile(const KvSpan& span, const float* t, uint32_t j0, uint32_t n,
                                  uint32_t D, uint32_t* k16, uint32_t* v16) {
  for (uint32_t d = 0; d < D / 2; ++d)
    for (uint32_t c = 0; c < kBk; c += 16)
      _mm512_storeu_si512(k16 + size_t(d) * kBk + c,
                          bf16_pair(_mm512_loadu_ps(t + size_t(2 * d) * kBk + c),
                                    _mm512_loadu_ps(t + size_t(2 * d + 1) * kBk + c)));
  for (uint32_t j = 0; j < kBk; j += 2) {
    uint32_t* dst = v16 + size_t(j / 2) * D;
    if (j >= n) {
      std::fill(dst, dst + D, 0u);
      continue;
    }
    const float* va = span.v_row(j0 + j, D);
    const float* vb = j + 1 < n ? span.v_row(j0 + j + 1, D) : nullptr;
    for (uint32_t d = 0; d < D; d += 16)
      _mm512_storeu_si512(dst + d, bf16_pair(_mm512_loadu_ps(va + d),
                                             vb ? _mm512_loadu_ps(vb + d) : _mm512_setzero_ps()));
  }
}
#endif

// Largest of x[0..n), n >= 1.
float row_max(const float* x, uint32_t n) {
  uint32_t j = 0;
  float mx = x[0];
  if (n >= kLanes) {
    VecF m = simd::load(x);
    for (j = kLanes; j + kLanes <= n; j += kLanes) m = simd::vmax(m, simd::load(x + j));
    mx = simd::hmax(m);
  }
  for (; j < n; ++j) mx = std::max(mx, x[j]);
  return mx;
}

#if KVZIP_ATTENTION_BF16
// e^x for x <= 0 within ~3e-6 relative (2^f by its degree-5 Taylor polynomial on [-1/2, 1/2],
// scaled by vscalefps, which also takes x = -inf and underflow to 0): half exp_vec's instructions,
// for the bf16 path, whose probabilities are then rounded to 8 bits of mantissa anyway.
inline VecF exp_fast(VecF x) {
  const __m512 t = _mm512_mul_ps(_mm512_max_ps((__m512)x, _mm512_set1_ps(-104.0f)),
                                 _mm512_set1_ps(1.44269504088896341f));
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, n);
  __m512 p = _mm512_set1_ps(1.3333558e-3f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504109e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022651e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return (VecF)_mm512_scalef_ps(p, n);
}
#endif

// Turns row r of S into probabilities against the updated running max and folds it into the
// state. valid = keys of this block the row may see. Returns valid. kFast: exp_fast (bf16 path).
template <bool kFast = false>
uint32_t softmax_row(float* srow, uint32_t valid, uint32_t ncols, RowState st, uint32_t r,
                     uint32_t Dp) {
  if (valid == 0) {
    std::fill(srow, srow + ncols, 0.0f);
    return 0;
  }
  float mx = row_max(srow, valid);
  if (mx == -INFINITY) {  // every visible row of the block skipped (KvSpan::skip)
    std::fill(srow, srow + ncols, 0.0f);
    return 0;
  }
  float m_old = st.m[r];
  float m_new = std::max(m_old, mx);
  // 0 when m_old is -inf; 1 (exp(0), no call) when the block leaves the max where it was.
  float alpha = m_old == m_new ? 1.0f : std::exp(m_old - m_new);
  VecF mv = simd::splat(m_new);
  VecF sum{};
  uint32_t full = valid / kLanes * kLanes;
  // Weights under e^kNegligible (a logit that far below the row's max, or a skipped row's -inf)
  // are exactly 0: the row's max weight is 1, so they move no fp32 sum of it, while their
  // products with V would be denormal, which x86 cores compute through microcode assists about
  // a hundred times slower (a composed cache's skipped rows made its recompute 3.6x slower).
  const VecF cut = simd::splat(kNegligible), zero{};
  for (uint32_t j = 0; j < full; j += kLanes) {
    const VecF x = simd::load(srow + j) - mv;
    VecF e;
#if KVZIP_ATTENTION_BF16
    if constexpr (kFast) e = exp_fast(x);
    else
#endif
      e = simd::exp_vec(x);
    e = x < cut ? zero : e;
    simd::store(srow + j, e);
    sum += e;
  }
  float total = simd::hsum(sum);
  for (uint32_t j = full; j < valid; ++j) {
    const float x = srow[j] - m_new;
    srow[j] = x < kNegligible ? 0.0f : simd::exp_scalar(x);
    total += srow[j];
  }
  std::fill(srow + valid, srow + ncols, 0.0f);
  st.m[r] = m_new;
  st.l[r] = st.l[r] * alpha + total;
  if (alpha != 1.0f) {
    float* acc = st.acc + size_t(r) * Dp;
    for (uint32_t d = 0; d < Dp; ++d) acc[d] *= alpha;
  }
  return valid;
}

#if defined(__AVX2__)
// The 8 x 8 block r[i][d] -> r[d][i] in registers (unpack, shuffle, lane swap: 24 shuffles for 64
// floats, against 64 scalar stores to 64 rows of dst).
inline void transpose8(__m256 (&r)[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2)
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]), t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44),
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44),
          u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i)
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20),
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
}
#endif

// dst (D, kBk) = key rows [j0, j0 + n) of `kv` transposed; columns [n, kBk) zero. A decode call
// transposes every key block of the cache (prefill transposes them once, transpose_keys), so this
// copy is a large share of a decode step: 8 x 8 register blocks where the build has AVX2.
void transpose_tile(const KvSpan& kv, uint32_t j0, uint32_t n, uint32_t D, float* dst) {
  uint32_t j = 0;
#if defined(__AVX2__)
  for (; j + 8 <= n; j += 8) {
    const float* src[8];
    for (uint32_t i = 0; i < 8; ++i) src[i] = kv.k_row(j0 + j + i, D);
    uint32_t d = 0;
    for (; d + 8 <= D; d += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src[i] + d);
      transpose8(r);
      for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dst + size_t(d + i) * kBk + j, r[i]);
    }
    for (; d < D; ++d)
      for (uint32_t i = 0; i < 8; ++i) dst[size_t(d) * kBk + j + i] = src[i][d];
  }
#endif
  for (; j < n; ++j) {
    const float* src = kv.k_row(j0 + j, D);
    for (uint32_t d = 0; d < D; ++d) dst[size_t(d) * kBk + j] = src[d];
  }
  if (n < kBk)
    for (uint32_t d = 0; d < D; ++d)
      std::fill(dst + size_t(d) * kBk + n, dst + size_t(d + 1) * kBk, 0.0f);
}

#if KVZIP_ATTENTION_BF16
// P·V of rows [r, r + kQkRows) over key rows [kb, kb + jmax) on bf16 pairs. The tile's V pairs
// start at even rows, so a block starting at an odd row takes the pair before it with that row's
// probability 0. The rows' pairs come straight from S (zero past each row's keys, up to ncols,
// which bounds 2·np at an even start).
KVZIP_BF16_FN void pv_bf16(const Plan& p, uint32_t h, Scratch& sc, float* acc, uint32_t r,
                           uint32_t kb, uint32_t jmax) {
  const uint32_t D = p.a->D, off = kb % kBk, odd = off & 1u, np = (jmax + odd + 1) / 2,
                 ldp = kBk / 2 + 1;
  for (uint32_t i = 0; i < kQkRows; ++i) {
    const float* srow = sc.s.data() + size_t(r + i) * kBk;
    if (odd) {
      float* t = sc.prow.data();
      t[0] = 0.0f;
      std::memcpy(t + 1, srow, jmax * sizeof(float));
      t[1 + jmax] = 0.0f;
      srow = t;
    }
    probability_pairs(srow, np, sc.p16.data() + size_t(i) * ldp);
  }
  const uint32_t* v16 =
      p.kt.v16 + ((size_t(h) * p.kt.n_tiles + kb / kBk) * (kBk / 2) + (off - odd) / 2) * D;
  uint32_t dc = 0;
  for (; dc + kPvVecs * 16 <= D; dc += kPvVecs * 16)
    pv_tile_bf16<kPvVecs>(sc.p16.data(), ldp, v16, acc, r, dc, np, D);
  for (; dc < D; dc += 16) pv_tile_bf16<1>(sc.p16.data(), ldp, v16, acc, r, dc, np, D);
}
#endif

// Folds key rows [kb, kb + nk) of KV head h into the state of rows [0, Rp). The rows lie in one
// kBk tile (kb need not be a multiple of kBk); scores() may read up to kQkCols - 1 columns past
// them (other keys or padding, finite), which the softmax masks.
void key_block(const Plan& p, uint32_t h, Scratch& sc, RowState st, uint32_t Rp, uint32_t kb,
               uint32_t nk) {
  const uint32_t D = p.a->D, Dp = p.Dp;
  const uint32_t ncols = round_up(nk, kQkCols);  // <= kBk; columns past len are zero
  const KvSpan& span = p.a->kv[h];
  const float* v = span.v_row(kb, D);
  size_t ldv = D;
  const bool straddles = span.two_segments() && kb < span.split && kb + nk > span.split;
  if (D != Dp || straddles) {  // whole vectors per row, rows from both segments: gather the block
    for (uint32_t j = 0; j < nk; ++j)
      std::memcpy(sc.v.data() + size_t(j) * Dp, span.v_row(kb + j, D), D * sizeof(float));
    v = sc.v.data();
    ldv = Dp;
  }
#if KVZIP_ATTENTION_BF16
  if (p.bf16) {
    scores_bf16(sc.q16.data(),
                p.kt.k16 + (size_t(h) * p.kt.n_tiles + kb / kBk) * (D / 2) * kBk + kb % kBk, kBk,
                sc.s.data(), Rp, ncols, D / 2);
  } else
#endif
  {
    // The keys transposed: the call's shared tiles, the span's own (made at load), or this block's.
    const float* kt = sc.kt.data();
    if (p.kt.data) {
      kt = p.kt.tile(h, kb / kBk, D) + kb % kBk;
    } else if (kb + nk <= span.kt_rows) {
      kt = span.kt + size_t(kb / kBk) * D * kBk + kb % kBk;
    } else {
      transpose_tile(span, kb, nk, D, sc.kt.data());
    }
    scores(sc.q.data(), kt, kBk, sc.s.data(), Rp, sc.rows, ncols, D, Dp);
  }
  if (span.skip) {  // rows no token may see: their logits become -inf (a weight of ~1e-38 at most)
    for (uint32_t j = 0; j < nk; ++j) {
      if (!skip_bit(span.skip, kb + j)) continue;
      for (uint32_t r = 0; r < Rp; ++r) sc.s[size_t(r) * kBk + j] = -INFINITY;
    }
  }
  if (p.local && kb >= p.local->target_begin && kb < p.local->target_end) {
    for (uint32_t r = 0; r < Rp; ++r)  // segments never straddle the target range
      std::memcpy(sc.tl.data() + size_t(r) * p.n_target + (kb - p.local->target_begin),
                  sc.s.data() + size_t(r) * kBk, nk * sizeof(float));
  }
  const bool need_pv = p.a->out != nullptr;
  for (uint32_t r = 0; r < Rp; r += kQkRows) {
    uint32_t jmax = 0;
    for (uint32_t i = r; i < r + kQkRows; ++i) {
      uint32_t lim = sc.limit[i];
      uint32_t valid = lim <= kb ? 0 : std::min(nk, lim - kb);
      const uint32_t lo = sc.first[i] <= kb ? 0 : std::min(valid, sc.first[i] - kb);
      float* srow = sc.s.data() + size_t(i) * kBk;
      if (lo > 0) {  // a window's start inside this block: the columns before it are not seen
        if (p.bf16) softmax_row<true>(srow + lo, valid - lo, ncols - lo, st, i, Dp);
        else softmax_row(srow + lo, valid - lo, ncols - lo, st, i, Dp);
        std::fill(srow, srow + lo, 0.0f);
        if (valid > lo) jmax = std::max(jmax, valid);
        continue;
      }
      jmax = std::max(jmax, p.bf16 ? softmax_row<true>(srow, valid, ncols, st, i, Dp)
                                   : softmax_row(srow, valid, ncols, st, i, Dp));
    }
    sc.jmax[r / kQkRows] = need_pv ? jmax : 0;
#if KVZIP_ATTENTION_BF16
    if (p.bf16 && jmax && need_pv) pv_bf16(p, h, sc, st.acc, r, kb, jmax);
#endif
  }
  // Every row step's softmax (and so its rescale of acc) is done: P·V strip by strip.
  if (!need_pv || p.bf16) return;
  if (Rp == kQkRows) {
    if (sc.jmax[0]) pv_walk(sc.s.data(), v, ldv, st.acc, sc.jmax[0], Dp, sc.rows);
  } else {
    pv_steps(sc.s.data(), v, ldv, st.acc, Rp, sc.jmax.data(), Dp);
  }
}

// Rows of KV head h that token t sees: KvSpan::limit, else all of them (non-causal calls), else
// the causal rule (every earlier row and its own).
uint32_t visible_rows(const AttentionArgs& a, uint32_t h, uint32_t t) {
  const KvSpan& s = a.kv[h];
  if (s.limit) return std::min(s.limit[t], s.len);
  return a.causal ? s.len - a.T + t + 1 : s.len;
}

// Gathers the scaled queries of tokens [i0, i1) of KV head h into sc.q (row = (token, g)) and
// their visibility limits; returns the padded row count.
uint32_t gather_queries(const Plan& p, uint32_t h, uint32_t i0, uint32_t i1, Scratch& sc) {
  const AttentionArgs& a = *p.a;
  const uint32_t G = p.G, D = a.D, Dp = p.Dp;
  const uint32_t R = (i1 - i0) * G, Rp = round_up(R, kQkRows);
  std::fill(sc.q.begin(), sc.q.begin() + size_t(Rp) * Dp, 0.0f);
  for (uint32_t t = i0; t < i1; ++t) {
    for (uint32_t g = 0; g < G; ++g) {
      const float* src = a.q + (size_t(t) * a.Hq + size_t(h) * G + g) * D;
      float* dst = sc.q.data() + size_t((t - i0) * G + g) * Dp;
      for (uint32_t d = 0; d < D; ++d) dst[d] = src[d] * a.scale;
    }
  }
  sc.rows = R;
  for (uint32_t r = 0; r < Rp; ++r) {
    sc.limit[r] = r < R ? visible_rows(a, h, i0 + r / G) : 0;
    sc.first[r] = a.window && sc.limit[r] > a.window ? sc.limit[r] - a.window : 0;
    if (r < R && a.kv[h].from) sc.first[r] = std::max(sc.first[r], a.kv[h].from[i0 + r / G]);
  }
  return Rp;
}

// Writes acc / l of the task's rows to out (and m + log l to p.lse when asked: the scores are
// pre-scaled, so that is log Σ exp(scale·q·k) over the rows the query saw).
void finalize(const Plan& p, uint32_t h, uint32_t i0, uint32_t i1, RowState st) {
  const AttentionArgs& a = *p.a;
  if (!a.out) return;
  for (uint32_t t = i0; t < i1; ++t) {
    for (uint32_t g = 0; g < p.G; ++g) {
      uint32_t r = (t - i0) * p.G + g;
      float inv = st.l[r] > 0 ? 1.0f / st.l[r] : 0.0f;
      float* dst = a.out + (size_t(t) * a.Hq + size_t(h) * p.G + g) * a.D;
      for (uint32_t d = 0; d < a.D; ++d) dst[d] = st.acc[size_t(r) * p.Dp + d] * inv;
      if (p.lse)
        p.lse[size_t(t) * a.Hq + size_t(h) * p.G + g] =
            st.l[r] > 0 ? st.m[r] + std::log(st.l[r]) : -INFINITY;
    }
  }
}

// Layout of one task's partial state inside a flat buffer: m (Rmax), l (Rmax), acc (Rmax, Dp).
size_t state_floats(const Plan& p) { return size_t(p.Rmax) * (p.Dp + 2); }
RowState state_at(const Plan& p, float* base) {
  return RowState{base, base + p.Rmax, base + 2 * size_t(p.Rmax)};
}

// Key rows [b, e) of head h as segments that never cross a kBk tile.
void segments(const Plan& p, uint32_t h, Scratch& sc, RowState st, uint32_t Rp, uint32_t b,
              uint32_t e) {
  while (b < e) {
    const uint32_t end = std::min(e, (b / kBk + 1) * kBk);
    key_block(p, h, sc, st, Rp, b, end - b);
    b = end;
  }
}

// After the local rows: (m, l) of each row is its local softmax normaliser, so the local
// probability of target key j is exp(logit - m - log l). Max-combines, over the task's R real rows,
// into local->out's row of head h.
void local_finish(const Plan& p, uint32_t h, Scratch& sc, RowState st, uint32_t R) {
  const uint32_t n = p.n_target;
  if (n == 0) return;
  float* best = sc.best.data();
  std::fill(best, best + n, -INFINITY);
  for (uint32_t r = 0; r < R; ++r) {
    const float* t = sc.tl.data() + size_t(r) * n;
    const float m = st.m[r], log_l = std::log(st.l[r]);  // l >= 1: the row sees its own key
    const VecF mv = simd::splat(m), lv = simd::splat(log_l);
    uint32_t j = 0;
    for (; j + kLanes <= n; j += kLanes)
      simd::store(best + j, simd::vmax(simd::load(best + j), (simd::load(t + j) - mv) - lv));
    for (; j < n; ++j) best[j] = std::max(best[j], (t[j] - m) - log_l);
  }
  uint32_t j = 0;
  for (; j + kLanes <= n; j += kLanes) simd::store(best + j, simd::exp_vec(simd::load(best + j)));
  for (; j < n; ++j) best[j] = simd::exp_scalar(best[j]);
  float* out = p.local->out + h * p.local->out_stride;
  std::lock_guard<std::mutex> lock(p.locks[h]);
  for (j = 0; j + kLanes <= n; j += kLanes)
    simd::store(out + j, simd::vmax(simd::load(out + j), simd::load(best + j)));
  for (; j < n; ++j) out[j] = std::max(out[j], best[j]);
}

// A task with local statistics (n_split == 1): local rows, the statistics, then the other rows.
void run_local_task(const Plan& p, uint32_t h, Scratch& sc, RowState st, uint32_t Rp, uint32_t R,
                    uint32_t total) {
  const LocalMaxProb& L = *p.local;
  segments(p, h, sc, st, Rp, 0, L.prefix_end);
  segments(p, h, sc, st, Rp, L.target_begin, L.target_end);
  segments(p, h, sc, st, Rp, L.own_begin, total);
  local_finish(p, h, sc, st, R);
  if (!p.a->out) return;  // statistics only
  segments(p, h, sc, st, Rp, L.prefix_end, L.target_begin);
  segments(p, h, sc, st, Rp, L.target_end, L.own_begin);
}

void run_task(const Plan& p, uint32_t h, uint32_t qb, uint32_t split, float* state_mem) {
  const AttentionArgs& a = *p.a;
  const uint32_t i0 = qb * p.Bq, i1 = std::min(a.T, i0 + p.Bq);
  Scratch& sc = tl_scratch;
  sc.fit(p);
  const uint32_t Rp = gather_queries(p, h, i0, i1, sc);
#if KVZIP_ATTENTION_BF16
  if (p.bf16)
    for (uint32_t r = 0; r < Rp; ++r)
      pairs_of(sc.q.data() + size_t(r) * p.Dp, a.D / 2, sc.q16.data() + size_t(r) * (a.D / 2));
#endif
  RowState st = state_at(p, state_mem);
  std::fill(st.m, st.m + p.Rmax, -INFINITY);
  std::fill(st.l, st.l + p.Rmax, 0.0f);
  std::fill(st.acc, st.acc + size_t(p.Rmax) * p.Dp, 0.0f);
  uint32_t total = 0;  // keys the block's rows see at most (the last token's, when causal)
  for (uint32_t r = 0; r < Rp; ++r) total = std::max(total, sc.limit[r]);
  if (p.local) {
    run_local_task(p, h, sc, st, Rp, (i1 - i0) * p.G, total);
    finalize(p, h, i0, i1, st);
    return;
  }
  // A sliding window: key blocks wholly before every row's window are never visited (with
  // KvSpan::from a later token's window may start lower than the first's).
  uint32_t lowest = 0;
  if (a.window || a.kv[h].from) {
    lowest = sc.first[0];
    for (uint32_t r = 1; r < sc.rows; ++r) lowest = std::min(lowest, sc.first[r]);
    lowest = std::min(lowest, total) / kBk * kBk;
  }
  const uint32_t chunk = round_up((total - lowest + p.n_split - 1) / p.n_split, kBk);
  const uint32_t k_begin = std::min(total, lowest + split * chunk),
                 k_end = std::min(total, k_begin + chunk);
  for (uint32_t kb = k_begin; kb < k_end; kb += kBk)
    key_block(p, h, sc, st, Rp, kb, std::min(kBk, k_end - kb));
  if (p.n_split == 1) finalize(p, h, i0, i1, st);
}

// Merges the n_split partial states of (h, qb) into out.
void merge_splits(const Plan& p, uint32_t h, uint32_t qb, float* states) {
  const size_t stride = state_floats(p);
  RowState dst = state_at(p, states);
  thread_local std::vector<float>
      acc;  // one row's merged sums (a merge runs once a decode step and head)
  acc.resize(p.Dp);
  for (uint32_t r = 0; r < p.Rmax; ++r) {
    float M = -INFINITY;
    for (uint32_t s = 0; s < p.n_split; ++s) M = std::max(M, state_at(p, states + s * stride).m[r]);
    if (M == -INFINITY) continue;
    float L = 0;
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (uint32_t s = 0; s < p.n_split; ++s) {
      RowState src = state_at(p, states + s * stride);
      if (src.m[r] == -INFINITY) continue;
      float w = std::exp(src.m[r] - M);
      L += src.l[r] * w;
      for (uint32_t d = 0; d < p.Dp; ++d) acc[d] += src.acc[size_t(r) * p.Dp + d] * w;
    }
    dst.m[r] = M;  // the merged state's max (read by finalize only for the log-sum-exp)
    dst.l[r] = L;
    std::copy(acc.begin(), acc.end(), dst.acc + size_t(r) * p.Dp);
  }
  const uint32_t i0 = qb * p.Bq, i1 = std::min(p.a->T, i0 + p.Bq);
  finalize(p, h, i0, i1, dst);
}

// A call's shared tiles, reused across calls from the same thread.
struct TileBufs {
  std::vector<float> kt;
  std::vector<uint32_t> k16, v16;
};

// Whether a call gets bf16 products (AttentionArgs::bf16): this build and CPU have them, every row
// vector is whole 16-lane vectors and the spans are one segment each. Such a call always makes
// shared tiles (also for one query block), so a row's products do not depend on how the call's
// query tokens are blocked or chunked.
bool use_bf16(const Plan& p) {
#if KVZIP_ATTENTION_BF16
  static const bool cpu = bf16_attention_available();
  return p.a->bf16 && cpu && p.a->D % 16 == 0 && !p.two_segments;
#else
  (void)p;
  return false;
#endif
}

// Fills the tiles of kt with every head's K transposed, zero beyond each head's length; one task
// per tile. With bf16, also the pair tiles (KeysT::k16, v16) of every tile, in the same task.
void transpose_keys(ThreadPool* pool, const AttentionArgs& a, TileBufs& buf, bool bf16, KeysT* kt) {
  uint32_t max_len = 0;
  for (uint32_t h = 0; h < a.Hkv; ++h) max_len = std::max(max_len, a.kv[h].len);
  kt->n_tiles = (max_len + kBk - 1) / kBk;
  const size_t tiles = size_t(a.Hkv) * kt->n_tiles, tile = size_t(a.D) * kBk;
  // + kQkCols: a segment starting inside the last tile's last row may be read that far past it.
  buf.kt.resize(tiles * tile + kQkCols);
  kt->data = buf.kt.data();
  kt->kv = a.kv;
  if (bf16) {
    buf.k16.resize(tiles * tile / 2 + kQkCols);
    buf.v16.resize(tiles * tile / 2);
    kt->k16 = buf.k16.data();
    kt->v16 = buf.v16.data();
  }
  run_tasks(pool, tiles, [&](size_t t) {
    const uint32_t h = static_cast<uint32_t>(t / kt->n_tiles),
                   b = static_cast<uint32_t>(t % kt->n_tiles);
    const uint32_t j0 = b * kBk, len = a.kv[h].len;
    const uint32_t n = len > j0 ? std::min(kBk, len - j0) : 0;
    if (!KeysT::premade(a.kv[h], b)) transpose_tile(a.kv[h], j0, n, a.D, buf.kt.data() + t * tile);
#if KVZIP_ATTENTION_BF16
    if (bf16)
      make_bf16_tile(a.kv[h], kt->tile(h, b, a.D), j0, n, a.D, buf.k16.data() + t * tile / 2,
                     buf.v16.data() + t * tile / 2);
#endif
  });
  if (bf16) std::fill(buf.k16.end() - kQkCols, buf.k16.end(), 0u);
}

void check_args(const AttentionArgs& a) {
  KVZIP_ASSERT(a.q && a.kv && (a.out || a.local));
  KVZIP_ASSERT(a.Hkv > 0 && a.Hq % a.Hkv == 0 && a.D > 0);
  for (uint32_t h = 0; h < a.Hkv; ++h) {
    const KvSpan& s = a.kv[h];
    KVZIP_ASSERT(!a.causal || s.limit || s.len >= a.T);
    KVZIP_ASSERT(!s.quantized());  // attention_quantized hands only the f32 rows here
    KVZIP_ASSERT((s.k && s.v) || (s.two_segments() && s.split == 0) || s.len == 0);
    KVZIP_ASSERT(!s.two_segments() || (s.v_tail && s.split <= s.len));
    KVZIP_ASSERT(s.kt_rows <= (s.two_segments() ? s.split : s.len) && (s.kt || s.kt_rows == 0));
  }
  KVZIP_ASSERT(!(a.window && a.local));  // check_window refuses it first
  if (const LocalMaxProb* L = a.local) {
    KVZIP_ASSERT(a.causal && a.n_parts == 0);
    for (uint32_t h = 0; h < a.Hkv; ++h) KVZIP_ASSERT(!a.kv[h].limit && !a.kv[h].skip);
    KVZIP_ASSERT(L->out && L->prefix_end <= L->target_begin && L->target_begin <= L->target_end &&
                 L->target_end <= L->own_begin);
    for (uint32_t h = 0; h < a.Hkv; ++h) KVZIP_ASSERT(L->own_begin <= a.kv[h].len - a.T);
  }
}

Plan make_plan(const AttentionArgs& a, uint32_t threads) {
  Plan p;
  p.a = &a;
  p.G = a.Hq / a.Hkv;
  p.Dp = round_up(a.D, kLanes);
  p.Bq = std::max(1u, (wide_heads(a.D) ? 2 * kRowsTarget : kRowsTarget) / p.G);
  p.Bq = std::min(p.Bq, a.T);
  p.Rmax = round_up(p.Bq * p.G, kQkRows);
  p.n_qblocks = (a.T + p.Bq - 1) / p.Bq;
  for (uint32_t h = 0; h < a.Hkv; ++h) p.two_segments = p.two_segments || a.kv[h].two_segments();
  uint32_t max_len = 0;
  for (uint32_t h = 0; h < a.Hkv; ++h) max_len = std::max(max_len, a.kv[h].len);
  const uint32_t tasks = a.Hkv * p.n_qblocks, wanted = 4 * threads;
  p.bf16 = use_bf16(p);
  if (a.local) {  // the statistics need each row's whole local softmax in one task
    p.local = a.local;
    p.n_target = a.local->target_end - a.local->target_begin;
  } else if (threads > 1 && tasks < wanted && !p.bf16) {
    // (Not with bf16: a row's probabilities are rounded against its running max, so its products
    // are the same bits only when every row walks all its keys in one order.)
    uint32_t by_keys = std::max(1u, max_len / (2 * kBk));  // keep chunks >= two key blocks
    p.n_split = std::min((wanted + tasks - 1) / tasks, by_keys);
  }
  return p;
}

}  // namespace

void transpose_key_tiles(const float* k, uint32_t n, uint32_t D, float* out) {
  const KvSpan span{k, nullptr, n};
  const uint32_t tiles = (n + kBk - 1) / kBk;
  for (uint32_t b = 0; b < tiles; ++b)
    transpose_tile(span, b * kBk, std::min(kBk, n - b * kBk), D, out + size_t(b) * D * kBk);
  std::fill(out + size_t(tiles) * D * kBk, out + key_tile_floats(n, D), 0.0f);
  static_assert(kQkCols <= kKeyTilePad);
}

namespace {

// One call's plan and buffers, so that several calls can share one pass of the pool
// (attention_many) while each keeps the plan, and so the result, it gets alone.
struct CallRun {
  Plan p;
  std::vector<std::mutex> locks;  // (Hkv) with local statistics
  std::vector<float> states;      // (n_pairs · n_split, per_state) when the keys are split
  size_t n_pairs = 0, per_state = 0;
  size_t n_tasks() const { return n_pairs * p.n_split; }
  size_t n_merges() const { return p.n_split > 1 ? n_pairs : 0; }

  // Task order: later query blocks (more keys) first, so the long tasks start early.
  void pair_of(size_t i, uint32_t* h, uint32_t* qb) const {
    *qb = p.n_qblocks - 1 - static_cast<uint32_t>(i / p.a->Hkv);
    *h = static_cast<uint32_t>(i % p.a->Hkv);
  }
  void task(size_t i) {
    uint32_t h, qb;
    if (p.n_split == 1) {
      pair_of(i, &h, &qb);
      thread_local std::vector<float> state;
      state.resize(per_state);
      run_task(p, h, qb, 0, state.data());
      return;
    }
    pair_of(i / p.n_split, &h, &qb);
    const size_t slot = (size_t(h) * p.n_qblocks + qb) * p.n_split + i % p.n_split;
    run_task(p, h, qb, static_cast<uint32_t>(i % p.n_split), states.data() + slot * per_state);
  }
  void merge(size_t i) {
    const uint32_t h = static_cast<uint32_t>(i / p.n_qblocks),
                   qb = static_cast<uint32_t>(i % p.n_qblocks);
    merge_splits(p, h, qb, states.data() + i * p.n_split * per_state);
  }
};

// Plans `a` (T > 0) into r; transposes the call's keys first when several query blocks share them.
void prepare(ThreadPool* pool, const AttentionArgs& a, float* lse, TileBufs& bufs, CallRun& r) {
  check_args(a);
  r.p = make_plan(a, pool ? pool->size() : 1);
  r.p.lse = lse;
  if (r.p.n_qblocks > 1 || r.p.bf16) transpose_keys(pool, a, bufs, r.p.bf16, &r.p.kt);
  r.locks = std::vector<std::mutex>(a.local ? a.Hkv : 0);
  r.p.locks = r.locks.data();
  r.per_state = state_floats(r.p);
  r.n_pairs = size_t(a.Hkv) * r.p.n_qblocks;
  if (r.p.n_split > 1) r.states.resize(r.n_tasks() * r.per_state);
}

// Runs the tasks, then the merges, of every call in `runs`: one pass of the pool each.
void run_calls(ThreadPool* pool, std::span<CallRun> runs) {
  if (runs.size() == 1) {  // one call (every decode step of `query`): no task tables
    CallRun& r = runs[0];
    run_tasks(pool, r.n_tasks(), [&](size_t i) { r.task(i); });
    run_tasks(pool, r.n_merges(), [&](size_t i) { r.merge(i); });
    return;
  }
  std::vector<size_t> first(runs.size() + 1, 0), first_merge(runs.size() + 1, 0);
  for (size_t c = 0; c < runs.size(); ++c) {
    first[c + 1] = first[c] + runs[c].n_tasks();
    first_merge[c + 1] = first_merge[c] + runs[c].n_merges();
  }
  auto which = [](const std::vector<size_t>& f, size_t i) {
    return size_t(std::upper_bound(f.begin(), f.end(), i) - f.begin()) - 1;
  };
  run_tasks(pool, first.back(), [&](size_t i) {
    const size_t c = which(first, i);
    runs[c].task(i - first[c]);
  });
  run_tasks(pool, first_merge.back(), [&](size_t i) {
    const size_t c = which(first_merge, i);
    runs[c].merge(i - first_merge[c]);
  });
}

}  // namespace

void attention_f32(ThreadPool* pool, const AttentionArgs& a, float* lse) {
  if (a.T == 0) return;
  thread_local TileBufs kt_buf;  // reused across calls from the same thread
  CallRun r;
  prepare(pool, a, lse, kt_buf, r);
  run_calls(pool, std::span<CallRun>(&r, 1));
}

void attention_f32_many(ThreadPool* pool, const AttentionArgs* calls, float* const* lse, size_t n) {
  thread_local std::vector<TileBufs> kt_bufs;  // one per call with shared key tiles
  std::vector<CallRun> runs;
  runs.reserve(n);
  size_t n_bufs = 0;
  for (size_t i = 0; i < n; ++i) {
    if (calls[i].T == 0) continue;
    if (kt_bufs.size() <= n_bufs) kt_bufs.resize(n_bufs + 1);
    runs.emplace_back();
    prepare(pool, calls[i], lse[i], kt_bufs[n_bufs], runs.back());
    n_bufs += runs.back().p.kt.data != nullptr;
  }
  if (!runs.empty()) run_calls(pool, runs);
}

void attention_many(ThreadPool* pool, const AttentionArgs* calls, size_t n) {
  thread_local std::vector<TileBufs> kt_bufs;  // one per call with shared key tiles
  std::vector<CallRun> runs;
  runs.reserve(n);
  size_t n_bufs = 0;
  for (size_t i = 0; i < n; ++i) {
    const AttentionArgs& a = calls[i];
    check_window(a);
    bool quantized = false;
    for (uint32_t h = 0; a.kv && h < a.Hkv; ++h) quantized = quantized || a.kv[h].quantized();
    if (quantized || a.n_parts > 0) {  // its own steps (attention_quant.cc, attention_parts.cc)
      cpu::attention(pool, a);
      continue;
    }
    if (a.T == 0) continue;
    if (kt_bufs.size() <= n_bufs) kt_bufs.resize(n_bufs + 1);
    runs.emplace_back();
    prepare(pool, a, nullptr, kt_bufs[n_bufs], runs.back());
    n_bufs += runs.back().p.kt.data != nullptr;
  }
  if (!runs.empty()) run_calls(pool, runs);
}

}  // namespace kvzip::kernels::cpu::KVZIP_ATTENTION_ISA
