// AVX-512 VNNI decode kernels of the 8-bit-activation product (kernels/qdot.h) for every block
// type it reads (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K): sixteen rows a tile in 512-bit
// vectors, one to eight tokens a pass (a decode step of one answer or of a serving batch), the
// chain of kernels/qdot.h in each of the sixteen fp32 lanes per token, so the results are the
// scalar reference's bits (tests/kernels/test_qdot.cc compares every ISA's, at every T, bit for
// bit). qdot_avx512.cc runs them for a task's whole sixteen-row tiles and the tiles' kernels for
// the rest. One token instead runs eight-row tiles two blocks (Q6_K: two halves of a block) a
// step (the same vectors; decode_tiles8x2 below says why).
//
// Several tokens: a block's weights are unpacked once into registers and multiplied by each
// token's activations, so a step of T tokens still reads every weight byte once: 81% / 85% / 56%
// of the read bandwidth at T = 2 / 4 / 8 (Q4_0, 1B-shaped layers, two threads, bench_decode
// --tokens), Q4_K 80% / 71% / 44%, where the eight-row tiles (T < 8) and the GEMM reach 51% / 35% /
// 16% and 30% / 23% / 13%. Eight tokens a pass: their accumulators and a block's unpacked weights
// fill the registers.
//
// Why this shape (measured with bench/bench_decode.cc --resident: one thread, weights in L2,
// CPU time): decode streams each weight byte once, so a kernel reaches the memory bandwidth only if
// it computes well faster than a thread's share of it. The eight-row 256-bit kernels
// (qdot_decode_avx2.inc) compute Q4_0 at ~18 GB/s a thread and Q4_K at ~16, about what one thread
// of two streams from DRAM, so every stall is lost; these do the same integer work in half the
// instructions:
//  - four rows to a vector: a 128-bit lane per row (rows i, i+4, i+8, i+12 in vector i), so one
//    and-mask and one shift-and-mask split 64 bytes of nibbles, and two vpdpbusd (nibbles
//    unsigned, activations signed: no sign trick) take 128 products;
//  - the exact int32 sum per row and group from the four vectors' 16 lanes in nine operations
//    (two unpack-and-add levels), landing in row order;
//  - sixteen rows' fp16 scales converted by one vcvtph2ps; Q4_K's fields (d, dmin, the 6-bit
//    scales and mins) of sixteen rows by four gathers a super-block, a row a lane in row order,
//    unpacked by a dozen lane-wise operations (the 256-bit kernel: scalar unpacking per row and
//    byte transposes), then a shift and a mask a group: 23 against 20 GB/s.
// The fp32 steps per group are the 256-bit kernels' on sixteen lanes instead of eight.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "kernels/detail/qdot_panel_x86.h"  // KVZIP_VNNI
#include "kernels/detail/qdot_x86.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"  // the intrinsics' own undefined values
#endif

namespace kvzip::kernels::cpu::detail {

#if KVZIP_QDOT_X86

namespace {

using quant::GgmlType;

// For helpers GCC chose to outline (a call per block, its vectors passed through memory).
#define KVZIP_VNNI_INLINE KVZIP_VNNI __attribute__((always_inline)) inline

constexpr int kRows = 16;
// Tokens a pass over a tile (a decode step's batch is done in passes of at most this many).
constexpr uint32_t kMaxTokens = 8;

// Evenly spaced rows (no row map): row i + 4L at q[i] + L·4·stride, as four pointers and two
// strides (every load of lanes4 is then one addressing mode, no pointer arithmetic); the next
// tile's rows follow as one run, prefetched into L1 a block step at a time (a sequential stream:
// the hardware prefetchers, seeing sixteen short row streams, keep few loads in flight, and alone
// hold a 1B-shaped Q4_0 decode to 30% of the read bandwidth; prefetched into L2, 73%; into L1,
// 81%). off: lane k holds row k's offset from row 0, for the gathers of the blocks' scale fields.
struct Strided {
  const uint8_t* q[4];
  size_t s4, s12;
  const char* next;
  __m512i off;
  KVZIP_VNNI Strided(const uint8_t* p, size_t stride, const char* nx)
      : s4(4 * stride), s12(12 * stride), next(nx) {
    for (int i = 0; i < 4; ++i) q[i] = p + size_t(i) * stride;
    off =
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32(int(stride)));
  }
  const uint8_t* row0() const { return q[0]; }
  const uint8_t* lane(int i, int L) const { return L == 3 ? q[i] + s12 : q[i] + size_t(L) * s4; }
  void step(size_t bytes) {
    for (int i = 0; i < 4; ++i) q[i] += bytes;
  }
  void prefetch(uint32_t b, size_t bytes) const {
    const char* pf = next + size_t(b) * kRows * bytes;
    for (size_t l = 0; l < (kRows * bytes + 63) / 64; ++l) _mm_prefetch(pf + 64 * l, _MM_HINT_T0);
  }
};
// 16 bytes at `off` of rows i, i+4, i+8, i+12 as the four 128-bit lanes of one vector.
template <class Rows>
KVZIP_VNNI inline __m512i lanes4(const Rows& rows, int i, int off) {
  auto ld = [&](int L) KVZIP_VNNI {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows.lane(i, L) + off));
  };
  __m512i v = _mm512_castsi128_si512(ld(0));
  v = _mm512_inserti32x4(v, ld(1), 1);
  v = _mm512_inserti32x4(v, ld(2), 2);
  return _mm512_inserti32x4(v, ld(3), 3);
}

// The 32 bytes at `off` of rows i, i+4, i+8, i+12 as lanes4(off) and lanes4(off + 16): each row's
// 32 bytes in one load, two rows to a vector, and one 128-bit shuffle per half (lanes4 twice
// takes six inserts and eight loads).
template <class Rows>
KVZIP_VNNI_INLINE void lanes4x2(const Rows& rows, int i, int off, __m512i& lo, __m512i& hi) {
  auto ld = [&](int L) KVZIP_VNNI {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows.lane(i, L) + off));
  };
  const __m512i ab = _mm512_inserti64x4(_mm512_castsi256_si512(ld(0)), ld(1), 1);  // a0 a1 b0 b1
  const __m512i cd = _mm512_inserti64x4(_mm512_castsi256_si512(ld(2)), ld(3), 1);  // c0 c1 d0 d1
  lo = _mm512_shuffle_i64x2(ab, cd, _MM_SHUFFLE(2, 0, 2, 0));                      // a0 b0 c0 d0
  hi = _mm512_shuffle_i64x2(ab, cd, _MM_SHUFFLE(3, 1, 3, 1));                      // a1 b1 c1 d1
}

// The dword at byte `off` of each of the sixteen rows' current blocks (lane k: row k).
template <class Rows>
KVZIP_VNNI inline __m512i fields16(const Rows& rows, int off) {
  return _mm512_i32gather_epi32(rows.off, rows.row0() + off, 1);
}

// The four dwords at bytes off..off+15 of the sixteen rows' current blocks (lane k: row k): the
// rows' 16 bytes by lanes4, then a 4x4 dword transpose in each 128-bit lane (lane L of lanes4 i
// holds row i + 4L, so dword 4L + i of the result is row 4L + i). Four gathers cost more.
template <class Rows>
KVZIP_VNNI inline void header_fields16(const Rows& rows, int off, __m512i& f0, __m512i& f1,
                                       __m512i& f2, __m512i& f3) {
  const __m512i h0 = lanes4(rows, 0, off), h1 = lanes4(rows, 1, off), h2 = lanes4(rows, 2, off),
                h3 = lanes4(rows, 3, off);
  const __m512i t0 = _mm512_unpacklo_epi32(h0, h1), t1 = _mm512_unpackhi_epi32(h0, h1);
  const __m512i t2 = _mm512_unpacklo_epi32(h2, h3), t3 = _mm512_unpackhi_epi32(h2, h3);
  f0 = _mm512_unpacklo_epi64(t0, t2);
  f1 = _mm512_unpackhi_epi64(t0, t2);
  f2 = _mm512_unpacklo_epi64(t1, t3);
  f3 = _mm512_unpackhi_epi64(t1, t3);
}

// The fp16 fields at byte `off` of the sixteen rows' current blocks, as fp32 lanes 0..15, read
// by the integer units (one gather a block costs more: measured 20 against 26 GB/s on Q4_0).
template <class Rows>
KVZIP_VNNI_INLINE __m512 halves16(const Rows& rows, int off) {
  uint64_t w[4] = {};
  for (int L = 0; L < 4; ++L)
    for (int i = 0; i < 4; ++i) w[L] |= uint64_t(load_u16(rows.lane(i, L) + off)) << (16 * i);
  return _mm512_cvtph_ps(
      _mm256_setr_epi64x(int64_t(w[0]), int64_t(w[1]), int64_t(w[2]), int64_t(w[3])));
}

// The fp16 values in the low (kHigh: high) 16 bits of each lane, as fp32.
template <bool kHigh = false>
KVZIP_VNNI_INLINE __m512 halves_ps(__m512i v) {
  return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(kHigh ? _mm512_srli_epi32(v, 16) : v));
}

// Row sums from four vectors laid out as lanes4's (vector i, lane L: row i + 4L's four partial
// sums): lane r of the result is row r's exact total. Integer adds: any order gives the same.
KVZIP_VNNI inline __m512i row_sums16(const __m512i (&v)[4]) {
  const __m512i a =
      _mm512_add_epi32(_mm512_unpacklo_epi32(v[0], v[1]), _mm512_unpackhi_epi32(v[0], v[1]));
  const __m512i c =
      _mm512_add_epi32(_mm512_unpacklo_epi32(v[2], v[3]), _mm512_unpackhi_epi32(v[2], v[3]));
  // a, lane L: (row L's partials 0+2, row L+4's 0+2, row L's 1+3, row L+4's 1+3); c for rows
  // +8, +12.
  return _mm512_add_epi32(_mm512_unpacklo_epi64(a, c), _mm512_unpackhi_epi64(a, c));
}

// Σ q over each 16-element half of an activation block q (its 32 int8, loaded): byte sums of
// q + 128 (vpsadbw), less 16·128. Exact; the kernels that offset their weights take it off.
KVZIP_VNNI inline void half_sums(__m256i q, int32_t (&sx)[2]) {
  const __m256i sad =
      _mm256_sad_epu8(_mm256_xor_si256(q, _mm256_set1_epi8(char(0x80))), _mm256_setzero_si256());
  alignas(32) int64_t s4[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(s4), sad);
  sx[0] = int32_t(s4[0] + s4[1]) - 16 * 128;
  sx[1] = int32_t(s4[2] + s4[3]) - 16 * 128;
}

// Q5_0 / Q5_1: the fifth bit of element e is bit e of the block's 32-bit qh. Each row's qh comes in
// as lanes4's dword 0 of its lane; one byte shuffle spreads byte e / 8 over byte e of the lane,
// a test against bit e % 8 gives a mask, and a masked add puts the 16 in.
constexpr int kQhOff(GgmlType t) { return t == GgmlType::Q5_0 ? 2 : 4; }
template <int kHalf>  // 0: elements 0-15 (qh bits 0-15), 1: elements 16-31
KVZIP_VNNI inline __m512i add_bit4(__m512i nib, __m512i qh) {
  const __m512i spread =
      _mm512_set4_epi32(0x01010101 * (2 * kHalf + 1), 0x01010101 * (2 * kHalf + 1),
                        0x01010101 * (2 * kHalf), 0x01010101 * (2 * kHalf));
  const __m512i bit = _mm512_set1_epi64(int64_t(0x8040201008040201ULL));
  const __mmask64 set = _mm512_test_epi8_mask(_mm512_shuffle_epi8(qh, spread), bit);
  return _mm512_mask_add_epi8(nib, set, nib, _mm512_set1_epi8(16));
}

// Dword 0 of each 128-bit lane of head[0..3] (lanes4's layout: lane L of vector i is lane
// i + 4L's row) as lane i + 4L of one vector: the rows' block headers, read with their weights.
KVZIP_VNNI_INLINE __m512i head_dwords(const __m512i (&head)[4]) {
  return _mm512_unpacklo_epi64(_mm512_unpacklo_epi32(head[0], head[1]),
                               _mm512_unpacklo_epi32(head[2], head[3]));
}

// QFmt::scales' min of Q4_0 / Q4_1 / Q5_0 / Q5_1 for lanes with scale ws: −8·d (Q4_0), −16·d
// (Q5_0), or the block's own fp16 m at byte 2 (Q4_1, Q5_1).
template <GgmlType Ty, class Rows>
KVZIP_VNNI_INLINE __m512 legacy_min(const Rows& rows, __m512 ws) {
  if constexpr (Ty == GgmlType::Q4_0) return _mm512_mul_ps(_mm512_set1_ps(-8.0f), ws);
  else if constexpr (Ty == GgmlType::Q5_0) return _mm512_mul_ps(_mm512_set1_ps(-16.0f), ws);
  else return halves16(rows, 2);
}

// Q4_0 / Q4_1 / Q5_0 / Q5_1: y + c·ys, lanes 0..15 = the sixteen rows' dots with token c's blocks
// x + c·xs, for C tokens (a serving batch's step) from one pass over the weights: each block's
// weights are unpacked once and multiplied by every token's activations; per token the one-token
// kernel's chain. The Q5 types' eight-row kernels compute ~22 GB/s a thread (weights in L2),
// these about twice that.
template <GgmlType Ty, int C, class Rows>
KVZIP_VNNI inline void decode16(Rows rows, const Q8Act* x, size_t xs, uint32_t nblk, float* y,
                                size_t ys) {
  constexpr bool kQ5 = Ty == GgmlType::Q5_0 || Ty == GgmlType::Q5_1;
  static_assert(Ty == GgmlType::Q4_0 || Ty == GgmlType::Q4_1 || kQ5);
  constexpr size_t kBytes = QFmt<Ty>::kBytes;
  constexpr int kQsOff = Ty == GgmlType::Q4_0   ? 2
                         : Ty == GgmlType::Q4_1 ? 4
                         : Ty == GgmlType::Q5_0 ? 6
                                                : 8;
  const __m512i low4 = _mm512_set1_epi8(15);
  __m512 acc[C];  // token c: row k in lane k
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  for (uint32_t b = 0; b < nblk; ++b) {
    rows.prefetch(b, kBytes);
    // The group's weights of rows i, i+4, i+8, i+12: low (elements 0-15), high (16-31); ws the
    // rows' d, mw QFmt::scales' min.
    __m512i lo[4], hi[4];
    __m512 ws, mw;
    if (Ty == GgmlType::Q4_1 && b + 1 < nblk) {
      // Q4_1: the block's first 32 bytes of each row (past its end: the row's next block, so not
      // for the last one), two rows to a vector; the nibbles are bytes 4.. of each 128-bit lane
      // pair (one alignr), and d and m of sixteen rows come out of the four vectors by three
      // unpacks, where reading them by 32 scalar loads would cost the kernel a sixth of its speed
      // (one thread, weights in L2). Q4_0's single fp16 does not pay for the longer loads (they
      // measure slower there), so it keeps the 16-byte ones.
      __m512i head[4];
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        __m512i w1;
        lanes4x2(rows, i, 0, head[i], w1);
        const __m512i raw = _mm512_alignr_epi8(w1, head[i], kQsOff);
        lo[i] = _mm512_and_si512(raw, low4);
        hi[i] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4);
      }
      const __m512i f = head_dwords(head);
      ws = halves_ps(f);
      mw = halves_ps<true>(f);
    } else {
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        const __m512i raw = lanes4(rows, i, kQsOff);
        lo[i] = _mm512_and_si512(raw, low4);
        hi[i] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4);
        if constexpr (kQ5) {
          const __m512i qh = lanes4(rows, i, kQhOff(Ty));
          lo[i] = add_bit4<0>(lo[i], qh);
          hi[i] = add_bit4<1>(hi[i], qh);
        }
      }
      ws = halves16(rows, 0);
      mw = legacy_min<Ty>(rows, ws);
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const Q8Act& xa = x[size_t(c) * xs + b];
      const __m512i xlo =
          _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xa.q)));
      const __m512i xhi =
          _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xa.q + 16)));
      __m512i sum[4];
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i)
        sum[i] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[i], xlo), hi[i],
                                     xhi);
      const __m512i I = row_sums16(sum);
      const __m512 dws = _mm512_mul_ps(_mm512_set1_ps(xa.d), ws);
      acc[c] = _mm512_add_ps(acc[c], _mm512_fmadd_ps(_mm512_cvtepi32_ps(I), dws,
                                                     _mm512_mul_ps(_mm512_set1_ps(xa.s), mw)));
    }
    rows.step(kBytes);
  }
  for (int c = 0; c < C; ++c) _mm512_storeu_ps(y + size_t(c) * ys, acc[c]);
}

// Q8_0: an fp16 d and 32 int8 weights a block. vpdpbusd multiplies unsigned by signed bytes, so
// the weights go in offset to unsigned (w xor 0x80 = w + 128) and 128·Σx comes off in integers
// (Σx of each token's block by vpsadbw): the scalar kernel's exact Σ w·x, then its chain
// (acc += I·(dx·dw)). As in decode16, one pass over the weights serves a serving batch's tokens,
// so a step of T tokens reads each weight once.
template <int C, class Rows>
KVZIP_VNNI inline void decode16q8(Rows rows, const Q8Act* x, size_t xs, uint32_t nblk, float* y,
                                  size_t ys) {
  constexpr size_t kBytes = QFmt<GgmlType::Q8_0>::kBytes;
  const __m512i bias = _mm512_set1_epi8(char(0x80));
  __m512 acc[C];  // token c: row k in lane k
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  for (uint32_t b = 0; b < nblk; ++b) {
    rows.prefetch(b, kBytes);
    // Elements 0-15 (w[0]) and 16-31 (w[1]) of rows i, i+4, i+8, i+12, offset to unsigned.
    __m512i w[2][4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      __m512i lo, hi;
      lanes4x2(rows, i, 2, lo, hi);
      w[0][i] = _mm512_xor_si512(lo, bias);
      w[1][i] = _mm512_xor_si512(hi, bias);
    }
    const __m512 ws = halves16(rows, 0);
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const Q8Act& xa = x[size_t(c) * xs + b];
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xa.q));
      int32_t h[2];
      half_sums(q, h);
      const int32_t sx = h[0] + h[1];  // Σ q
      const __m512i xlo = _mm512_broadcast_i32x4(_mm256_castsi256_si128(q));
      const __m512i xhi = _mm512_broadcast_i32x4(_mm256_extracti128_si256(q, 1));
      __m512i sum[4];
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i)
        sum[i] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), w[0][i], xlo),
                                     w[1][i], xhi);
      const __m512i I = _mm512_sub_epi32(row_sums16(sum), _mm512_set1_epi32(128 * sx));
      acc[c] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(I), _mm512_mul_ps(_mm512_set1_ps(xa.d), ws), acc[c]);
    }
    rows.step(kBytes);
  }
  for (int c = 0; c < C; ++c) _mm512_storeu_ps(y + size_t(c) * ys, acc[c]);
}

// Byte G % 4 of each lane of v, as fp32 (Q4_K's 6-bit scales and mins: see decode16k).
template <int G>
KVZIP_VNNI inline __m512 byte_ps(__m512i v) {
  constexpr int kShift = 8 * (G % 4);
  const __m512i s = kShift ? _mm512_srli_epi32(v, kShift) : v;
  return _mm512_cvtepi32_ps(kShift == 24 ? s : _mm512_and_si512(s, _mm512_set1_epi32(0xff)));
}

template <class Fn, int... G>
KVZIP_VNNI inline void each_group8(Fn&& fn, std::integer_sequence<int, G...>) {
  (fn(std::integral_constant<int, G>{}), ...);
}

// Q4_K / Q5_K: a super-block of 256 elements is eight groups; group pair (2j, 2j+1) shares 32 bytes
// of nibbles at 16 + 32j (Q5_K: 48 + 32j; low nibbles group 2j, high group 2j+1), element e of
// either group in byte e; Q5_K's fifth bit of element e of group g is bit g of qh byte e. The
// scales, mins and d, dmin are laid out alike (QFmt).
// Bit G of each byte of v moved to bit 4 (16-bit shifts: what crosses into a neighbouring byte
// lands outside bit 4, which is all the caller keeps).
template <int G>
KVZIP_VNNI inline __m512i bit_to4(__m512i v) {
  if constexpr (G < 4) return _mm512_slli_epi16(v, 4 - G);
  else if constexpr (G == 4) return v;
  else return _mm512_srli_epi16(v, G - 4);
}

// A super-block's header of the sixteen lanes' rows: d, dmin, and the 12 bytes of 6-bit scales and
// mins unpacked as k4_scale_words does (bytes 0-3 of sc[0] / sc[1] are groups 0-3 / 4-7's scales,
// of mn[0] / mn[1] their mins).
struct KHeader {
  __m512 d, dmin;
  __m512i sc[2], mn[2];
};
template <class Rows>
KVZIP_VNNI_INLINE KHeader k_header(const Rows& rows) {
  __m512i dd, u0, u1, u2;
  header_fields16(rows, 0, dd, u0, u1, u2);
  const __m512i m6 = _mm512_set1_epi32(0x3f3f3f3f), m4 = _mm512_set1_epi32(0x0f0f0f0f),
                m2 = _mm512_set1_epi32(0x03030303);
  KHeader h;
  h.d = halves_ps(dd), h.dmin = halves_ps<true>(dd);
  h.sc[0] = _mm512_and_si512(u0, m6), h.mn[0] = _mm512_and_si512(u1, m6);
  h.sc[1] = _mm512_or_si512(_mm512_and_si512(u2, m4),
                            _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u0, 6), m2), 4));
  h.mn[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u2, 4), m4),
                            _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u1, 6), m2), 4));
  return h;
}

// QFmt::scales of group G: fw = d·sc, mw = −(dmin·mn), each one fp32 product (as decode8k).
template <int G>
KVZIP_VNNI_INLINE void k_scales(const KHeader& h, __m512& fw, __m512& mw) {
  const __m512i neg = _mm512_castps_si512(_mm512_set1_ps(-0.0f));
  fw = _mm512_mul_ps(h.d, byte_ps<G>(h.sc[G / 4]));
  mw = _mm512_castsi512_ps(_mm512_xor_si512(  // the sign flip (F, not DQ)
      _mm512_castps_si512(_mm512_mul_ps(h.dmin, byte_ps<G>(h.mn[G / 4]))), neg));
}

// Groups 2J and 2J + 1's weights from one pass over their 32 bytes: lanes4 at +0 holds elements
// 0-15 of each row, at +16 elements 16-31; wa group 2J (low nibbles), wb group 2J + 1.
template <GgmlType Ty, int J, class Rows>
KVZIP_VNNI_INLINE void k_pair_weights(const Rows& rows, __m512i (&wa)[4][2], __m512i (&wb)[4][2]) {
  constexpr bool kQ5 = Ty == GgmlType::Q5_K;
  constexpr int kQsOff = kQ5 ? 48 : 16;  // Q5_K: 32 bytes of fifth bits (qh) at 16 first
  const __m512i low4 = _mm512_set1_epi8(15), bit4 = _mm512_set1_epi8(16);
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    __m512i r0, r1;
    lanes4x2(rows, i, kQsOff + 32 * J, r0, r1);
    wa[i][0] = _mm512_and_si512(r0, low4), wa[i][1] = _mm512_and_si512(r1, low4);
    wb[i][0] = _mm512_and_si512(_mm512_srli_epi16(r0, 4), low4),
    wb[i][1] = _mm512_and_si512(_mm512_srli_epi16(r1, 4), low4);
    if constexpr (
        kQ5) {  // bit g of qh byte e is element e's fifth bit: to bit 4, merged (lo | (h & 16))
      __m512i h0, h1;
      lanes4x2(rows, i, 16, h0, h1);
      wa[i][0] = _mm512_ternarylogic_epi32(wa[i][0], bit_to4<2 * J>(h0), bit4, 0xF8);
      wa[i][1] = _mm512_ternarylogic_epi32(wa[i][1], bit_to4<2 * J>(h1), bit4, 0xF8);
      wb[i][0] = _mm512_ternarylogic_epi32(wb[i][0], bit_to4<2 * J + 1>(h0), bit4, 0xF8);
      wb[i][1] = _mm512_ternarylogic_epi32(wb[i][1], bit_to4<2 * J + 1>(h1), bit4, 0xF8);
    }
  }
}

// Σ over a group of the sixteen lanes' weights w times activations q0 (elements 0-15 in every
// 128-bit lane) and q1 (16-31): lane k the exact int32 sum of lanes4 row k.
KVZIP_VNNI_INLINE __m512i group_sums16(const __m512i (&w)[4][2], __m512i q0, __m512i q1) {
  __m512i sum[4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i)
    sum[i] =
        _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), w[i][0], q0), w[i][1], q1);
  return row_sums16(sum);
}

template <GgmlType Ty, int C, class Rows>
KVZIP_VNNI inline void decode16k(Rows rows, const Q8Act* x, size_t xs, uint32_t nblk, float* y,
                                 size_t ys) {
  constexpr size_t kBytes = QFmt<Ty>::kBytes;
  __m512 acc[C];  // token c: row k in lane k
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  for (uint32_t b = 0; b < nblk; ++b) {
    rows.prefetch(b, kBytes);
    const KHeader hd = k_header(rows);
    auto pair = [&](auto jc) KVZIP_VNNI {
      constexpr int j = decltype(jc)::value;
      __m512i wa[4][2], wb[4][2];
      k_pair_weights<Ty, j>(rows, wa, wb);
      __m512 fw[2], mw[2];
      k_scales<2 * j>(hd, fw[0], mw[0]);
      k_scales<2 * j + 1>(hd, fw[1], mw[1]);
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        const Q8Act* xb = x + size_t(c) * xs + size_t(b) * 8;
        auto step = [&](int h, const __m512i(&w)[4][2]) KVZIP_VNNI {
          const Q8Act& xa = xb[2 * j + h];
          const __m512i q0 =
              _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xa.q)));
          const __m512i q1 =
              _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xa.q + 16)));
          const __m512 dws = _mm512_mul_ps(_mm512_set1_ps(xa.d), fw[h]);
          const __m512 sxmw = _mm512_mul_ps(_mm512_set1_ps(xa.s), mw[h]);
          acc[c] = _mm512_add_ps(
              acc[c], _mm512_fmadd_ps(_mm512_cvtepi32_ps(group_sums16(w, q0, q1)), dws, sxmw));
        };
        step(0, wa);
        step(1, wb);
      }
    };
    each_group8(pair, std::make_integer_sequence<int, 4>{});
    rows.step(kBytes);
  }
  for (int c = 0; c < C; ++c) _mm512_storeu_ps(y + size_t(c) * ys, acc[c]);
}

// Byte J % 4 of each lane of v as a signed int8, as fp32 (Q6_K's sub-scales).
template <int J>
KVZIP_VNNI inline __m512 sbyte_ps(__m512i v) {
  return _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(v, 24 - 8 * (J % 4)), 24));
}

// Q6_K: sixteen 16-element sub-blocks a super-block, each with its int8 scale; sub-block
// j = 2g + h is bytes 16h..16h+15 of group g's ql and qh runs (QFmt<Q6_K>), so one lanes4 of each
// is one sub-block of four rows (both halves loaded at once by lanes4x2). The weights are summed
// unsigned (q = w + 32 in 0..63, built by one mask and one ternary-logic merge of the two high
// bits) and 32·Σx taken off in integers (exact, as decode8q6): the chain sees the scalar kernel's
// integers.
// Q6_K's sub-block scales of group G's two halves times d: the chain's ws = d·float(sub).
template <int G>
KVZIP_VNNI_INLINE void q6_scales(__m512 d, const __m512i (&sc)[4], __m512 (&ws)[2]) {
  ws[0] = _mm512_mul_ps(d, sbyte_ps<2 * G>(sc[(2 * G) / 4]));
  ws[1] = _mm512_mul_ps(d, sbyte_ps<2 * G + 1>(sc[(2 * G + 1) / 4]));
}

// Q6_K weights of group G from a vector of ql bytes and one of qh bytes (same elements).
template <int G>
KVZIP_VNNI_INLINE __m512i q6_unpack(__m512i ql, __m512i qh) {
  constexpr int k = G % 4;
  const __m512i lo = _mm512_and_si512(k < 2 ? ql : _mm512_srli_epi16(ql, 4), _mm512_set1_epi8(15));
  // qh bits 2k, 2k+1 to bits 4, 5 (16-bit shifts: bits crossing a byte are masked off).
  const __m512i hs = k == 0   ? _mm512_slli_epi16(qh, 4)
                     : k == 1 ? _mm512_slli_epi16(qh, 2)
                     : k == 2 ? qh
                              : _mm512_srli_epi16(qh, 2);
  return _mm512_ternarylogic_epi32(lo, hs, _mm512_set1_epi8(0x30), 0xF8);  // lo | (hs & 0x30)
}

// Group G's ql and qh byte offsets in a Q6_K block.
template <int G>
constexpr int kQ6Ql = 64 * (G / 4) + 32 * (G % 4 & 1);
template <int G>
constexpr int kQ6Qh = 128 + 32 * (G / 4);

// Group G's weights, both halves of four rows per vector: w[h][i] from ql and qh as
// lanes4(.. + 16h).
template <int G, class Rows>
KVZIP_VNNI_INLINE void q6_group_weights(const Rows& rows, __m512i (&w)[2][4]) {
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    __m512i ql[2], qh[2];
    lanes4x2(rows, i, kQ6Ql<G>, ql[0], ql[1]);
    lanes4x2(rows, i, kQ6Qh<G>, qh[0], qh[1]);
    for (int h = 0; h < 2; ++h) w[h][i] = q6_unpack<G>(ql[h], qh[h]);
  }
}

// Half h of a Q6_K group: the exact Σ (w − 32)·x of the sixteen lanes' rows (w unsigned: 32·Σx
// taken off in integers), for activations xq (16 bytes in every 128-bit lane) whose Σ is sx.
KVZIP_VNNI_INLINE __m512i q6_half_sums(const __m512i (&w)[4], __m512i xq, __m512i sx) {
  __m512i s[4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) s[i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[i], xq);
  return _mm512_sub_epi32(row_sums16(s), _mm512_slli_epi32(sx, 5));
}

template <int C, class Rows>
KVZIP_VNNI inline void decode16q6(Rows rows, const Q8Act* x, size_t xs, uint32_t nblk, float* y,
                                  size_t ys) {
  constexpr size_t kBytes = QFmt<GgmlType::Q6_K>::kBytes;
  __m512 acc[C];  // token c: row k in lane k
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  for (uint32_t b = 0; b < nblk; ++b) {
    rows.prefetch(b, kBytes);
    // d is bytes 208-209: read as the high half of the dword at 206 (the block's last bytes).
    const __m512 d = halves_ps<true>(fields16(rows, 206));
    __m512i sc[4];
    header_fields16(rows, 192, sc[0], sc[1], sc[2], sc[3]);
    auto group = [&](auto gc) KVZIP_VNNI {
      constexpr int g = decltype(gc)::value;
      __m512i w[2][4];
      q6_group_weights<g>(rows, w);
      __m512 ws[2];
      q6_scales<g>(d, sc, ws);
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        const Q8Act& xa = x[size_t(c) * xs + size_t(b) * 8 + g];
        int32_t sx[2];  // Σ x over each 16-element half
        half_sums(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xa.q)), sx);
        for (int h = 0; h < 2; ++h) {
          const __m512i xq = _mm512_broadcast_i32x4(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(xa.q + 16 * h)));
          const __m512i I = q6_half_sums(w[h], xq, _mm512_set1_epi32(sx[h]));
          acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I),
                                   _mm512_mul_ps(_mm512_set1_ps(xa.d), ws[h]), acc[c]);
        }
      }
    };
    each_group8(group, std::make_integer_sequence<int, 8>{});
    rows.step(kBytes);
  }
  for (int c = 0; c < C; ++c) _mm512_storeu_ps(y + size_t(c) * ys, acc[c]);
}

template <GgmlType Ty, int C, class Rows>
KVZIP_VNNI inline void tile16(const Rows& rows, const Q8Act* x, size_t xs, uint32_t nblk, float* y,
                              size_t ys) {
  if constexpr (Ty == GgmlType::Q4_K || Ty == GgmlType::Q5_K)
    decode16k<Ty, C>(rows, x, xs, nblk, y, ys);
  else if constexpr (Ty == GgmlType::Q6_K) decode16q6<C>(rows, x, xs, nblk, y, ys);
  else if constexpr (Ty == GgmlType::Q8_0) decode16q8<C>(rows, x, xs, nblk, y, ys);
  else decode16<Ty, C>(rows, x, xs, nblk, y, ys);
}

// One tile's rows for C = 1..kMaxTokens tokens, C chosen at run time.
template <GgmlType Ty, class Rows>
KVZIP_VNNI inline void tile16_tokens(const Rows& rows, const Q8Act* x, size_t xs, uint32_t nblk,
                                     float* y, size_t ys, uint32_t C) {
  switch (C) {
    case 1: return tile16<Ty, 1>(rows, x, xs, nblk, y, ys);
    case 2: return tile16<Ty, 2>(rows, x, xs, nblk, y, ys);
    case 3: return tile16<Ty, 3>(rows, x, xs, nblk, y, ys);
    case 4: return tile16<Ty, 4>(rows, x, xs, nblk, y, ys);
    case 5: return tile16<Ty, 5>(rows, x, xs, nblk, y, ys);
    case 6: return tile16<Ty, 6>(rows, x, xs, nblk, y, ys);
    case 7: return tile16<Ty, 7>(rows, x, xs, nblk, y, ys);
    default: return tile16<Ty, kMaxTokens>(rows, x, xs, nblk, y, ys);
  }
}

// Rows [a.r0, a.r0 + 16·n) of the a.T tokens, n whole tiles; returns the first row left. Tokens
// go kMaxTokens a pass (what fits the registers beside a block's unpacked weights); a tile's
// later passes read its rows from the cache the first one brought them into.
template <GgmlType Ty>
KVZIP_VNNI uint32_t decode_tiles16(const QDotRowsArgs& a) {
  const MatrixView& w = *a.w;
  const uint32_t nblk = w.cols / (32 * QFmt<Ty>::kGroups);
  const size_t xs = w.cols / 32, ys = w.rows;  // a token's activation blocks, its outputs
  uint32_t r = a.r0;
  // qdot hands the row kernels no row map (kernels/detail/stored_order.h); a caller that does
  // gets the tiles' kernels, which read one.
  if (w.row_map) return r;
  for (; r + kRows <= a.r1; r += kRows) {
    const uint8_t* p = w.data + size_t(r) * w.row_bytes;
    // The next tile's run, or this one's again where no whole tile of this task follows (the
    // rows after the task are another thread's: fetching them here would be wasted traffic).
    const uint8_t* next = r + 2 * kRows <= a.r1 ? p + kRows * w.row_bytes : p;
    for (uint32_t t = 0; t < a.T; t += kMaxTokens)
      tile16_tokens<Ty>(Strided(p, w.row_bytes, reinterpret_cast<const char*>(t == 0 ? next : p)),
                        a.x + t * xs, xs, nblk, a.y + t * ys + r, ys,
                        std::min(a.T - t, kMaxTokens));
  }
  return r;
}

// One token: eight rows, two blocks a step. Lane L of lanes4's vector i is row
// i + 4·(L & 1) at block b + (L >> 1) (Q6_K: 16 bytes further, a block's second half), so the
// sixteen-row kernels' loads, unpacking and sums serve eight rows' two blocks, and the fp32 chain
// adds block b's terms, then b + 1's (the scalar reference's order: the same bits). Why: a
// sixteen-row tile of wide rows is more than L1 holds beside the next tile's prefetched run (an
// FFN-down tile of Q4_0 is 73 KB), and the sixteen-row kernel streams 8B-shaped layers at 74% of
// the read bandwidth in 80 GB/s minutes and 78% in 50 GB/s ones; the 256-bit eight-row kernels
// keep the smaller tile but compute only 26-28 GB/s a thread. These compute as the sixteen-row
// kernel (53 GB/s a thread, weights in L2) on the eight-row tile: 84% and 91% (bench_decode
// --shape 8b; docs/cpu-kernels.md).
struct Strided8x2 {
  const uint8_t* q[4];
  size_t s4, blk;
  const char* next;
  __m512i off;  // lane k = i + 4L: that row and block's offset from row 0's current block
  KVZIP_VNNI Strided8x2(const uint8_t* p, size_t stride, size_t block, const char* nx)
      : s4(4 * stride), blk(block), next(nx) {
    for (int i = 0; i < 4; ++i) q[i] = p + size_t(i) * stride;
    const __m512i k = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i row = _mm512_and_si512(k, _mm512_set1_epi32(7));  // i + 4·(L & 1)
    off = _mm512_add_epi32(
        _mm512_mullo_epi32(row, _mm512_set1_epi32(int32_t(stride))),
        _mm512_mullo_epi32(_mm512_srli_epi32(k, 3), _mm512_set1_epi32(int32_t(block))));
  }
  const uint8_t* row0() const { return q[0]; }
  const uint8_t* lane(int i, int L) const {
    return q[i] + size_t(L & 1) * s4 + size_t(L >> 1) * blk;
  }
  void step(size_t bytes) {
    for (int i = 0; i < 4; ++i) q[i] += bytes;
  }
  void prefetch(uint32_t s, size_t bytes) const {  // bytes: a step's, two blocks
    const char* pf = next + size_t(s) * 8 * bytes;
    for (size_t l = 0; l < (8 * bytes + 63) / 64; ++l) _mm_prefetch(pf + 64 * l, _MM_HINT_T0);
  }
};

// Activation bytes a[0..16) in 128-bit lanes 0-1 and b[0..16) in lanes 2-3 (block b's, block
// b + 1's), and a float a in fp32 lanes 0-7, b in 8-15 (AVX-512 F only).
KVZIP_VNNI_INLINE __m512i x_pair(const int8_t* a, const int8_t* b) {
  return _mm512_inserti64x4(
      _mm512_castsi256_si512(
          _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a)))),
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b))), 1);
}
KVZIP_VNNI_INLINE __m512 f_pair(float a, float b) {
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_set1_ps(a)),
                                             _mm256_castps_pd(_mm256_set1_ps(b)), 1));
}
KVZIP_VNNI_INLINE __m256 high8(__m512 t) {
  return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(t), 1));
}

// One step of the Q4_0 / Q4_1 / Q5_0 / Q5_1 kernel: blocks b and b + 1 (kOne: b alone, the
// lanes of b + 1 unused) into acc, block b's terms first. kWide (Q4_1 and the Q5 types, a step
// with a block after b + 1: the loads reach into it) reads each row's block by one 32-byte load,
// header and all, as decode16's Q4_1 does, where the narrow path takes a scalar load per fp16
// field and row.
template <GgmlType Ty, bool kOne, bool kWide>
KVZIP_VNNI_INLINE void legacy_8x2_step(const Strided8x2& rows, const Q8Act* x, __m256& acc) {
  constexpr bool kQ5 = Ty == GgmlType::Q5_0 || Ty == GgmlType::Q5_1;
  constexpr int kQsOff = Ty == GgmlType::Q4_0   ? 2
                         : Ty == GgmlType::Q4_1 ? 4
                         : Ty == GgmlType::Q5_0 ? 6
                                                : 8;
  static_assert(!kWide || Ty != GgmlType::Q4_0);
  const __m512i low4 = _mm512_set1_epi8(15);
  __m512i w[4][2];
  __m512 ws, mw;
  auto unpack = [&](int i, __m512i raw, __m512i qh) KVZIP_VNNI {
    w[i][0] = _mm512_and_si512(raw, low4);
    w[i][1] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4);
    if constexpr (kQ5) {
      w[i][0] = add_bit4<0>(w[i][0], qh);
      w[i][1] = add_bit4<1>(w[i][1], qh);
    }
  };
  if constexpr (kWide) {
    __m512i head[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      __m512i w1;
      lanes4x2(rows, i, 0, head[i], w1);
      unpack(i, _mm512_alignr_epi8(w1, head[i], kQsOff),
             kQ5 ? _mm512_bsrli_epi128(head[i], kQhOff(Ty)) : head[i]);
    }
    const __m512i f = head_dwords(head);  // d, then Q4_1 / Q5_1's m
    ws = halves_ps(f);
    mw = Ty == GgmlType::Q5_0 ? _mm512_mul_ps(_mm512_set1_ps(-16.0f), ws) : halves_ps<true>(f);
  } else {
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i)
      unpack(i, lanes4(rows, i, kQsOff), kQ5 ? lanes4(rows, i, kQhOff(Ty)) : low4);
    ws = halves16(rows, 0);
    mw = legacy_min<Ty>(rows, ws);
  }
  const Q8Act& x0 = x[0];
  const Q8Act& x1 = x[kOne ? 0 : 1];
  const __m512i I = group_sums16(w, x_pair(x0.q, x1.q), x_pair(x0.q + 16, x1.q + 16));
  const __m512 t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I), _mm512_mul_ps(f_pair(x0.d, x1.d), ws),
                                   _mm512_mul_ps(f_pair(x0.s, x1.s), mw));
  acc = _mm256_add_ps(acc, _mm512_castps512_ps256(t));
  if constexpr (!kOne) acc = _mm256_add_ps(acc, high8(t));
}

// One step of the Q8_0 kernel: blocks b and b + 1 (kOne: b alone). The weights go in offset to
// unsigned and 128·Σx comes off in integers, as in decode16q8; that kernel's chain
// (acc += I·(dx·dw)), block b's term first.
template <bool kOne>
KVZIP_VNNI_INLINE void q80_8x2_step(const Strided8x2& rows, const Q8Act* x, __m256& acc) {
  const __m512i bias = _mm512_set1_epi8(char(0x80));
  __m512i w[4][2];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    __m512i lo, hi;
    lanes4x2(rows, i, 2, lo, hi);
    w[i][0] = _mm512_xor_si512(lo, bias);
    w[i][1] = _mm512_xor_si512(hi, bias);
  }
  const __m512 ws = halves16(rows, 0);
  const Q8Act& x0 = x[0];
  const Q8Act& x1 = x[kOne ? 0 : 1];
  int32_t h0[2], h1[2];  // Σ q of each block, by halves
  half_sums(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x0.q)), h0);
  half_sums(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x1.q)), h1);
  const __m512i off = _mm512_inserti64x4(_mm512_set1_epi32(128 * (h0[0] + h0[1])),
                                         _mm256_set1_epi32(128 * (h1[0] + h1[1])), 1);
  const __m512i I =
      _mm512_sub_epi32(group_sums16(w, x_pair(x0.q, x1.q), x_pair(x0.q + 16, x1.q + 16)), off);
  const __m512 f = _mm512_cvtepi32_ps(I), s = _mm512_mul_ps(f_pair(x0.d, x1.d), ws);
  acc = _mm256_fmadd_ps(_mm512_castps512_ps256(f), _mm512_castps512_ps256(s), acc);
  if constexpr (!kOne) acc = _mm256_fmadd_ps(high8(f), high8(s), acc);
}

// One step of the Q4_K / Q5_K kernel: super-blocks b and b + 1 (kOne: b alone). Block b's eight
// group terms go into acc as they come, block b + 1's are held and added after them: the
// scalar reference's order.
template <GgmlType Ty, bool kOne>
KVZIP_VNNI_INLINE void k_8x2_step(const Strided8x2& rows, const Q8Act* x, __m256& acc) {
  const KHeader hd = k_header(rows);
  __m256 later[8];
  auto pair = [&](auto jc) KVZIP_VNNI {
    constexpr int j = decltype(jc)::value;
    __m512i wa[4][2], wb[4][2];
    k_pair_weights<Ty, j>(rows, wa, wb);
    auto step = [&](auto gc, const __m512i(&w)[4][2]) KVZIP_VNNI {
      constexpr int g = decltype(gc)::value;
      __m512 fw, mw;
      k_scales<g>(hd, fw, mw);
      const Q8Act& x0 = x[g];
      const Q8Act& x1 = x[kOne ? g : 8 + g];
      const __m512i I = group_sums16(w, x_pair(x0.q, x1.q), x_pair(x0.q + 16, x1.q + 16));
      const __m512 t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I), _mm512_mul_ps(f_pair(x0.d, x1.d), fw),
                                       _mm512_mul_ps(f_pair(x0.s, x1.s), mw));
      acc = _mm256_add_ps(acc, _mm512_castps512_ps256(t));
      later[g] = high8(t);
    };
    step(std::integral_constant<int, 2 * j>{}, wa);
    step(std::integral_constant<int, 2 * j + 1>{}, wb);
  };
  each_group8(pair, std::make_integer_sequence<int, 4>{});
  if constexpr (!kOne)
    for (int g = 0; g < 8; ++g) acc = _mm256_add_ps(acc, later[g]);
}

// One Q6_K super-block of eight rows: a group's two 16-element halves side by side (rows: the
// weight bytes through `w`, a Strided8x2 whose second lane pair sits 16 bytes on; the header
// through `hd`, whose second pair repeats the first). The chain's two terms of a group, half 0
// then half 1, are then lanes 0-7 then 8-15 of one vector: no term waits.
KVZIP_VNNI_INLINE void q6_8x2_block(const Strided8x2& w, const Strided8x2& hd, const Q8Act* x,
                                    __m256& acc) {
  const __m512 d = halves_ps<true>(fields16(hd, 206));
  __m512i sc[4];
  header_fields16(hd, 192, sc[0], sc[1], sc[2], sc[3]);
  auto group = [&](auto gc) KVZIP_VNNI {
    constexpr int g = decltype(gc)::value;
    __m512i wv[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i)
      wv[i] = q6_unpack<g>(lanes4(w, i, kQ6Ql<g>), lanes4(w, i, kQ6Qh<g>));
    // Sub-scale 2g for half 0's lanes, 2g + 1 for half 1's, times d.
    const __m512 sub = _mm512_mask_blend_ps(__mmask16(0xFF00), sbyte_ps<2 * g>(sc[(2 * g) / 4]),
                                            sbyte_ps<2 * g + 1>(sc[(2 * g + 1) / 4]));
    const __m512 ws = _mm512_mul_ps(d, sub);
    const Q8Act& xa = x[g];
    int32_t sx[2];  // Σ x over each 16-element half
    half_sums(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xa.q)), sx);
    const __m512i sxv = _mm512_inserti64x4(_mm512_set1_epi32(sx[0]), _mm256_set1_epi32(sx[1]), 1);
    const __m512 I = _mm512_cvtepi32_ps(q6_half_sums(wv, x_pair(xa.q, xa.q + 16), sxv));
    const __m512 sc2 = _mm512_mul_ps(_mm512_set1_ps(xa.d), ws);
    acc = _mm256_fmadd_ps(_mm512_castps512_ps256(I), _mm512_castps512_ps256(sc2), acc);
    acc = _mm256_fmadd_ps(high8(I), high8(sc2), acc);
  };
  each_group8(group, std::make_integer_sequence<int, 8>{});
}

// Rows [a.r0, a.r0 + 8·n) of one token, n whole eight-row tiles; returns the first row left.
template <GgmlType Ty>
KVZIP_VNNI uint32_t decode_tiles8x2(const QDotRowsArgs& a) {
  const MatrixView& w = *a.w;
  constexpr size_t kBytes = QFmt<Ty>::kBytes;
  constexpr uint32_t kGroups = QFmt<Ty>::kGroups;  // activation blocks a weight block
  const uint32_t nblk = w.cols / (32 * kGroups);
  uint32_t r = a.r0;
  if (w.row_map || a.T != 1) return r;
  // kWide: the step may read into the block after its two (legacy_8x2_step).
  auto step = [&](auto one, auto wide, const Strided8x2& rows, const Q8Act* x,
                  __m256& acc) KVZIP_VNNI {
    constexpr bool kOne = decltype(one)::value;
    if constexpr (Ty == GgmlType::Q4_K || Ty == GgmlType::Q5_K) k_8x2_step<Ty, kOne>(rows, x, acc);
    else if constexpr (Ty == GgmlType::Q8_0) q80_8x2_step<kOne>(rows, x, acc);
    else legacy_8x2_step<Ty, kOne, decltype(wide)::value && Ty != GgmlType::Q4_0>(rows, x, acc);
  };
  for (; r + 8 <= a.r1; r += 8) {
    const uint8_t* p = w.data + size_t(r) * w.row_bytes;
    const uint8_t* next = r + 16 <= a.r1 ? p + 8 * w.row_bytes : p;
    if constexpr (Ty == GgmlType::Q6_K) {  // a block a step, its halves side by side
      Strided8x2 wts(p, w.row_bytes, 16, reinterpret_cast<const char*>(next)),
          hdr(p, w.row_bytes, 0, nullptr);
      __m256 acc = _mm256_setzero_ps();
      for (uint32_t b = 0; b < nblk; ++b) {
        wts.prefetch(b, kBytes);
        q6_8x2_block(wts, hdr, a.x + size_t(b) * kGroups, acc);
        wts.step(kBytes), hdr.step(kBytes);
      }
      _mm256_storeu_ps(a.y + r, acc);
      continue;
    }
    Strided8x2 rows(p, w.row_bytes, kBytes, reinterpret_cast<const char*>(next));
    __m256 acc = _mm256_setzero_ps();
    uint32_t b = 0;
    for (; b + 2 <= nblk; b += 2) {
      rows.prefetch(b / 2, 2 * kBytes);
      if (b + 2 < nblk)
        step(std::false_type{}, std::true_type{}, rows, a.x + size_t(b) * kGroups, acc);
      else step(std::false_type{}, std::false_type{}, rows, a.x + size_t(b) * kGroups, acc);
      rows.step(2 * kBytes);
    }
    if (b < nblk)  // an odd last block: its lanes for b + 1 read block b again
      step(std::true_type{}, std::false_type{}, Strided8x2(rows.q[0], w.row_bytes, 0, rows.next),
           a.x + size_t(b) * kGroups, acc);
    _mm256_storeu_ps(a.y + r, acc);
  }
  return r;
}

}  // namespace

QDecodeFn qdot_decode8x2_vnni(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: return decode_tiles8x2<GgmlType::Q4_0>;
    case GgmlType::Q4_1: return decode_tiles8x2<GgmlType::Q4_1>;
    case GgmlType::Q5_0: return decode_tiles8x2<GgmlType::Q5_0>;
    case GgmlType::Q5_1: return decode_tiles8x2<GgmlType::Q5_1>;
    case GgmlType::Q8_0: return decode_tiles8x2<GgmlType::Q8_0>;
    case GgmlType::Q4_K: return decode_tiles8x2<GgmlType::Q4_K>;
    case GgmlType::Q5_K: return decode_tiles8x2<GgmlType::Q5_K>;
    case GgmlType::Q6_K: return decode_tiles8x2<GgmlType::Q6_K>;
    default: return nullptr;
  }
}

QDecodeFn qdot_decode16_vnni(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: return decode_tiles16<GgmlType::Q4_0>;
    case GgmlType::Q4_1: return decode_tiles16<GgmlType::Q4_1>;
    case GgmlType::Q5_0: return decode_tiles16<GgmlType::Q5_0>;
    case GgmlType::Q5_1: return decode_tiles16<GgmlType::Q5_1>;
    case GgmlType::Q4_K: return decode_tiles16<GgmlType::Q4_K>;
    case GgmlType::Q5_K: return decode_tiles16<GgmlType::Q5_K>;
    case GgmlType::Q6_K: return decode_tiles16<GgmlType::Q6_K>;
    case GgmlType::Q8_0: return decode_tiles16<GgmlType::Q8_0>;
    default: return nullptr;
  }
}

#else  // no x86 variant in this build

QDecodeFn qdot_decode16_vnni(quant::GgmlType) { return nullptr; }
QDecodeFn qdot_decode8x2_vnni(quant::GgmlType) { return nullptr; }

#endif

}  // namespace kvzip::kernels::cpu::detail
