// AVX-512 VNNI decode (T = 1) kernels of the 8-bit-activation product (kernels/qdot.h) for Q4_0,
// Q4_1 and Q4_K: sixteen rows a tile in 512-bit vectors, the chain of kernels/qdot.h in each of
// the sixteen fp32 lanes, so the results are the scalar reference's bits (tests/kernels/test_qdot.cc
// compares every ISA's, at every T, bit for bit). qdot_avx512.cc runs them for a task's whole
// sixteen-row tiles and its eight-row kernels for the rest.
//
// Why this shape (measured on Zen 4, bench/bench_decode.cc --resident: one thread, weights in L2,
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
//  - scales of sixteen rows converted by one vcvtph2ps (Q4_K: the 6-bit scales and mins
//    transposed once per super-block as the 256-bit kernel does, then one permute a group).
// The fp32 steps per group are the 256-bit kernels' on sixteen lanes instead of eight.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#include "kernels/detail/qdot_panel_x86.h"  // KVZIP_VNNI
#include "kernels/detail/qdot_x86.h"

namespace kvzip::kernels::cpu::detail {

#if KVZIP_QDOT_X86

namespace {

using quant::GgmlType;

constexpr int kRows = 16;
// Bytes ahead of the current block that each row is prefetched into L1 (as the 256-bit kernels).
constexpr size_t kAhead = 1024;

// Evenly spaced rows (no row map): row k at p + k·stride; the next tile's rows follow as one run,
// prefetched into L2 a block step at a time.
struct Strided {
  const uint8_t* p;
  size_t stride;
  const char* next;
  const uint8_t* at(int k) const { return p + size_t(k) * stride; }
  void step(size_t bytes) { p += bytes; }
  void prefetch(uint32_t b, size_t bytes) const {
    const char* pf = next + size_t(b) * kRows * bytes;
    for (size_t l = 0; l < (kRows * bytes + 63) / 64; ++l) _mm_prefetch(pf + 64 * l, _MM_HINT_T1);
  }
};
// Rows through a row map: sixteen pointers; each prefetched 1 KiB ahead.
struct Listed {
  const uint8_t* p[kRows];
  const uint8_t* at(int k) const { return p[k]; }
  void step(size_t bytes) {
    for (int k = 0; k < kRows; ++k) p[k] += bytes;
  }
  void prefetch(uint32_t, size_t) const {
    for (int k = 0; k < kRows; ++k) _mm_prefetch(reinterpret_cast<const char*>(p[k]) + kAhead, _MM_HINT_T0);
  }
};

// 16 bytes at `off` of rows i, i+4, i+8, i+12 as the four 128-bit lanes of one vector.
template <class Rows>
KVZIP_VNNI inline __m512i lanes4(const Rows& rows, int i, int off) {
  __m512i v = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows.at(i) + off)));
  v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows.at(i + 4) + off)), 1);
  v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows.at(i + 8) + off)), 2);
  return _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows.at(i + 12) + off)), 3);
}

// Row sums from four vectors laid out as lanes4's (vector i, lane L: row i + 4L's four partial
// sums): lane r of the result is row r's exact total. Integer adds: any order gives the same.
KVZIP_VNNI inline __m512i row_sums16(const __m512i (&v)[4]) {
  const __m512i a = _mm512_add_epi32(_mm512_unpacklo_epi32(v[0], v[1]), _mm512_unpackhi_epi32(v[0], v[1]));
  const __m512i c = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2], v[3]), _mm512_unpackhi_epi32(v[2], v[3]));
  // a, lane L: (row L's partials 0+2, row L+4's 0+2, row L's 1+3, row L+4's 1+3); c for rows +8, +12.
  return _mm512_add_epi32(_mm512_unpacklo_epi64(a, c), _mm512_unpackhi_epi64(a, c));
}

// Σ w·q of a 32-element group of sixteen rows whose 16 bytes of nibbles are at `off` (low
// nibbles elements 0-15, high nibbles 16-31: Q4_0, Q4_1), q the activation's 32 int8.
template <class Rows>
KVZIP_VNNI inline __m512i nibble_sums(const Rows& rows, int off, const int8_t* q) {
  const __m512i low4 = _mm512_set1_epi8(15);
  const __m512i xlo = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
  const __m512i xhi = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16)));
  __m512i s[4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    const __m512i raw = lanes4(rows, i, off);
    s[i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(raw, low4), xlo);
    s[i] = _mm512_dpbusd_epi32(s[i], _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4), xhi);
  }
  return row_sums16(s);
}

// The fp16 fields at byte `off` of the sixteen rows' current blocks, as fp32 lanes 0..15.
template <class Rows>
KVZIP_VNNI inline __m512 halves16(const Rows& rows, int off) {
  uint64_t w[4] = {};
  for (int q = 0; q < 4; ++q)
    for (int k = 0; k < 4; ++k) w[q] |= uint64_t(load_u16(rows.at(4 * q + k) + off)) << (16 * k);
  return _mm512_cvtph_ps(_mm256_setr_epi64x(int64_t(w[0]), int64_t(w[1]), int64_t(w[2]), int64_t(w[3])));
}

// Q4_0 / Q4_1: y[0..15] = the sixteen rows' dots with one token's blocks x.
template <GgmlType Ty, class Rows>
KVZIP_VNNI inline void decode16(Rows rows, const Q8Act* x, uint32_t nblk, float* y) {
  static_assert(Ty == GgmlType::Q4_0 || Ty == GgmlType::Q4_1);
  constexpr size_t kBytes = QFmt<Ty>::kBytes;
  constexpr int kQsOff = Ty == GgmlType::Q4_1 ? 4 : 2;
  __m512 acc = _mm512_setzero_ps();  // row k in lane k
  for (uint32_t b = 0; b < nblk; ++b) {
    rows.prefetch(b, kBytes);
    const __m512i I = nibble_sums(rows, kQsOff, x[b].q);
    const __m512 ws = halves16(rows, 0);
    const __m512 dws = _mm512_mul_ps(_mm512_set1_ps(x[b].d), ws);
    // QFmt::scales' min: −8·d (Q4_0) or the block's own (Q4_1); the chain's step as decode8's.
    __m512 mw;
    if constexpr (Ty == GgmlType::Q4_0) mw = _mm512_mul_ps(_mm512_set1_ps(-8.0f), ws);
    else mw = halves16(rows, 2);
    acc = _mm512_add_ps(acc, _mm512_fmadd_ps(_mm512_cvtepi32_ps(I), dws, _mm512_mul_ps(_mm512_set1_ps(x[b].s), mw)));
    rows.step(kBytes);
  }
  _mm512_storeu_ps(y, acc);
}

// The eight 6-bit scales (or mins) of sixteen rows, transposed: dword g % 4 of 128-bit lane L of
// the (g < 4 ? lo : hi) vector holds byte g of rows 4L..4L+3 (two 256-bit transposes of
// qdot_decode_avx2.inc's transpose_words side by side).
KVZIP_VNNI inline void transpose16(const uint64_t (&w)[kRows], __m512i& lo, __m512i& hi) {
  __m512i c[2];
  for (int h = 0; h < 2; ++h) {  // rows 8h..8h+7: even rows in a, odd in b, so the unpacks keep order
    const uint64_t* r = w + 8 * h;
    const __m256i a = _mm256_setr_epi64x(int64_t(r[0]), int64_t(r[2]), int64_t(r[4]), int64_t(r[6]));
    const __m256i b = _mm256_setr_epi64x(int64_t(r[1]), int64_t(r[3]), int64_t(r[5]), int64_t(r[7]));
    c[h] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_unpacklo_epi8(a, b)), _mm256_unpackhi_epi8(a, b), 1);
  }
  // c[h]: 128-bit lanes (rows 8h+0,1 | 8h+4,5 | 8h+2,3 | 8h+6,7) interleaved bytewise.
  const __m512i idx_lo = _mm512_setr_epi64(0, 1, 2, 3, 8, 9, 10, 11);  // c[0]'s lanes 0, 1, c[1]'s 0, 1
  const __m512i idx_hi = _mm512_setr_epi64(4, 5, 6, 7, 12, 13, 14, 15);
  const __m512i x01 = _mm512_permutex2var_epi64(c[0], idx_lo, c[1]);  // (0,1 | 4,5 | 8,9 | 12,13)
  const __m512i x23 = _mm512_permutex2var_epi64(c[0], idx_hi, c[1]);  // (2,3 | 6,7 | 10,11 | 14,15)
  lo = _mm512_unpacklo_epi16(x01, x23);  // lane L: bytes 0-3 of rows 4L..4L+3, per byte four rows
  hi = _mm512_unpackhi_epi16(x01, x23);
}

// Group G's sixteen bytes (rows 0-15) from transpose16's output, as fp32 lanes.
template <int G>
KVZIP_VNNI inline __m512 group_bytes16(const __m512i& lo, const __m512i& hi) {
  const __m512i idx = _mm512_setr_epi32(G % 4, G % 4 + 4, G % 4 + 8, G % 4 + 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m128i v = _mm512_castsi512_si128(_mm512_permutexvar_epi32(idx, G < 4 ? lo : hi));
  return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v));
}

template <class Fn, int... G>
KVZIP_VNNI inline void each_group8(Fn&& fn, std::integer_sequence<int, G...>) {
  (fn(std::integral_constant<int, G>{}), ...);
}

// Q4_K: a super-block of 256 elements is eight groups; group pair (2j, 2j+1) shares 32 bytes of
// nibbles at 16 + 32j (low nibbles group 2j, high group 2j+1), element e of either group in byte e.
template <class Rows>
KVZIP_VNNI inline void decode16k(Rows rows, const Q8Act* x, uint32_t nblk, float* y) {
  constexpr size_t kBytes = QFmt<GgmlType::Q4_K>::kBytes;
  const __m512i low4 = _mm512_set1_epi8(15);
  const __m512i neg = _mm512_castps_si512(_mm512_set1_ps(-0.0f));
  __m512 acc = _mm512_setzero_ps();  // row k in lane k
  for (uint32_t b = 0; b < nblk; ++b) {
    rows.prefetch(b, kBytes);
    const __m512 d = halves16(rows, 0), dmin = halves16(rows, 2);
    uint64_t scw[kRows], mnw[kRows];
    for (int k = 0; k < kRows; ++k) k4_scale_words(rows.at(k) + 4, scw[k], mnw[k]);
    __m512i sc_lo, sc_hi, mn_lo, mn_hi;
    transpose16(scw, sc_lo, sc_hi);
    transpose16(mnw, mn_lo, mn_hi);
    const Q8Act* xb = x + size_t(b) * 8;
    auto pair = [&](auto jc) KVZIP_VNNI {
      constexpr int j = decltype(jc)::value;
      // Both groups' products from one pass over the 32 bytes: lanes4 at +0 holds elements
      // 0-15 of each row, at +16 elements 16-31.
      const int8_t* qa = xb[2 * j].q;
      const int8_t* qb = xb[2 * j + 1].q;
      const __m512i a_lo = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qa)));
      const __m512i a_hi = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qa + 16)));
      const __m512i b_lo = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qb)));
      const __m512i b_hi = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qb + 16)));
      __m512i sa[4], sb[4];
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        const __m512i r0 = lanes4(rows, i, 16 + 32 * j), r1 = lanes4(rows, i, 16 + 32 * j + 16);
        sa[i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(r0, low4), a_lo);
        sa[i] = _mm512_dpbusd_epi32(sa[i], _mm512_and_si512(r1, low4), a_hi);
        sb[i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(_mm512_srli_epi16(r0, 4), low4), b_lo);
        sb[i] = _mm512_dpbusd_epi32(sb[i], _mm512_and_si512(_mm512_srli_epi16(r1, 4), low4), b_hi);
      }
      const __m512i I[2] = {row_sums16(sa), row_sums16(sb)};
      auto step = [&](auto gc, const __m512i& Ig) KVZIP_VNNI {
        constexpr int g = decltype(gc)::value;
        // QFmt::scales: fw = d·sc, mw = −(dmin·mn), each one fp32 product (as decode8k).
        const __m512 fw = _mm512_mul_ps(d, group_bytes16<g>(sc_lo, sc_hi));
        const __m512 mw = _mm512_castsi512_ps(_mm512_xor_si512(  // the sign flip (F, not DQ)
            _mm512_castps_si512(_mm512_mul_ps(dmin, group_bytes16<g>(mn_lo, mn_hi))), neg));
        const __m512 dws = _mm512_mul_ps(_mm512_set1_ps(xb[g].d), fw);
        const __m512 sxmw = _mm512_mul_ps(_mm512_set1_ps(xb[g].s), mw);
        acc = _mm512_add_ps(acc, _mm512_fmadd_ps(_mm512_cvtepi32_ps(Ig), dws, sxmw));
      };
      step(std::integral_constant<int, 2 * j>{}, I[0]);
      step(std::integral_constant<int, 2 * j + 1>{}, I[1]);
    };
    each_group8(pair, std::make_integer_sequence<int, 4>{});
    rows.step(kBytes);
  }
  _mm512_storeu_ps(y, acc);
}

template <GgmlType Ty, class Rows>
KVZIP_VNNI inline void tile16(const Rows& rows, const Q8Act* x, uint32_t nblk, float* y) {
  if constexpr (Ty == GgmlType::Q4_K) decode16k(rows, x, nblk, y);
  else decode16<Ty>(rows, x, nblk, y);
}

// Rows [a.r0, a.r0 + 16·n) of the one token, n whole tiles; returns the first row left.
template <GgmlType Ty>
KVZIP_VNNI uint32_t decode_tiles16(const QDotRowsArgs& a) {
  const MatrixView& w = *a.w;
  const uint32_t nblk = w.cols / (32 * QFmt<Ty>::kGroups);
  uint32_t r = a.r0;
  for (; r + kRows <= a.r1; r += kRows) {
    if (!w.row_map) {
      const uint8_t* p = w.data + size_t(r) * w.row_bytes;
      // The next tile's run, or this one's again where no whole tile follows (never past the data).
      const uint8_t* next = r + 2 * kRows <= w.rows ? p + kRows * w.row_bytes : p;
      tile16<Ty>(Strided{p, w.row_bytes, reinterpret_cast<const char*>(next)}, a.x, nblk, a.y + r);
    } else {
      Listed rows;
      for (int k = 0; k < kRows; ++k) rows.p[k] = w.data + size_t(w.row_map[r + k]) * w.row_bytes;
      tile16<Ty>(rows, a.x, nblk, a.y + r);
    }
  }
  return r;
}

}  // namespace

QDecodeFn qdot_decode16_vnni(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: return decode_tiles16<GgmlType::Q4_0>;
    case GgmlType::Q4_1: return decode_tiles16<GgmlType::Q4_1>;
    case GgmlType::Q4_K: return decode_tiles16<GgmlType::Q4_K>;
    default: return nullptr;
  }
}

#else  // no x86 variant in this build

QDecodeFn qdot_decode16_vnni(quant::GgmlType) { return nullptr; }

#endif

}  // namespace kvzip::kernels::cpu::detail
