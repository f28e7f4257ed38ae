// F16 / BF16 / F32 weight rows times a few fp32 tokens (kernels/detail/half_rows.h): the portable
// reference, which spells out the one summation order, and the AVX2 and AVX-512 kernels that
// follow it bit for bit (tests/kernels/test_half_rows.cc). The x86 kernels are compiled with
// function target attributes, as the quantized GEMV's are, so a build without -march has them.
//
// Shape: a group of rows (four; two for a one-token call on AVX-512, see rows_avx512) shares each
// 16 elements of x; the weights are widened in registers (vcvtph2ps for F16, a 16-bit shift for
// BF16: both exact) and never stored. Each thread takes long runs of rows (matmul.cc). Decode
// streams every weight byte from DRAM once, and four row streams alone kept it at 56% of the read
// bandwidth (F16, 1B-shaped layers, two threads, bench/bench_decode.cc); while a group
// computes, the next group's rows are prefetched into L1 as one sequential run at the group's pace
// (the rows of a matrix are contiguous): 83%.
#include "kernels/detail/half_rows.h"

#include <cmath>
#include <cstring>

#include "common/half.h"
#include "kernels/detail/qgemv_rows.h"  // cpu_has_avx2, cpu_has_avx512

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define KVZIP_HALF_X86 1
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // the intrinsics' own undefined values
#endif
#endif

namespace kvzip::kernels::cpu::detail {

using quant::GgmlType;

namespace {

constexpr uint32_t kChunk = 16;

inline const uint8_t* row_ptr(const MatrixView& w, uint32_t r) {
  return w.data + size_t(w.row_map ? w.row_map[r] : r) * w.row_bytes;
}

template <GgmlType Ty>
inline float weight(const uint8_t* row, uint32_t i) {
  if constexpr (Ty == GgmlType::F32) {
    float f;
    std::memcpy(&f, row + 4 * size_t(i), 4);
    return f;
  } else {
    uint16_t h;
    std::memcpy(&h, row + 2 * size_t(i), 2);
    return Ty == GgmlType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
  }
}

// The fold of half_rows.h: s[l] += s[l + 8], s[l] += s[l + 4], s[l] += s[l + 2], s[0] + s[1].
inline float fold16(float (&s)[16]) {
  for (int l = 0; l < 8; ++l) s[l] += s[l + 8];
  for (int l = 0; l < 4; ++l) s[l] += s[l + 4];
  for (int l = 0; l < 2; ++l) s[l] += s[l + 2];
  return s[0] + s[1];
}

template <GgmlType Ty>
void rows_portable(const MatmulArgs& a, uint32_t r0, uint32_t r1) {
  const uint32_t n = a.w.cols;
  for (uint32_t r = r0; r < r1; ++r) {
    const uint8_t* row = row_ptr(a.w, r);
    for (uint32_t t = 0; t < a.T; ++t) {
      const float* x = a.x + size_t(t) * n;
      float s[16] = {};
      for (uint32_t c = 0; c < n; c += kChunk)
        for (uint32_t l = 0; l < kChunk; ++l) {
          const bool in = c + l < n;
          s[l] = std::fma(in ? weight<Ty>(row, c + l) : 0.0f, in ? x[c + l] : 0.0f, s[l]);
        }
      a.y[size_t(t) * a.w.rows + r] = fold16(s);
    }
  }
}

template <class Pick>
HalfRowsFn pick_type(GgmlType t, Pick pick) {
  switch (t) {
    case GgmlType::F16: return pick(std::integral_constant<GgmlType, GgmlType::F16>{});
    case GgmlType::BF16: return pick(std::integral_constant<GgmlType, GgmlType::BF16>{});
    case GgmlType::F32: return pick(std::integral_constant<GgmlType, GgmlType::F32>{});
    default: return nullptr;
  }
}

#if KVZIP_HALF_X86

template <GgmlType Ty>
constexpr size_t kEltBytes = Ty == GgmlType::F32 ? 4 : 2;

// The byte run of the group of R rows after the one at r, where the rows are evenly spaced and
// that group is this task's too (the rows after the task are another thread's); else null.
template <int R>
inline const char* next_group(const MatrixView& w, uint32_t r, uint32_t r1) {
  if (R == 1 || w.row_map || r + 2 * R > r1) return nullptr;
  return reinterpret_cast<const char*>(w.data + size_t(r + R) * w.row_bytes);
}

// Before elements [c, c + 2·kChunk) of a group of R rows: what the next group's run holds at the
// same fraction, 2·kChunk·R weights a call (a no-op without a next group).
template <GgmlType Ty, int R>
inline void prefetch_next(const char* next, uint32_t c) {
  if (!next || c % (2 * kChunk) != 0) return;
  constexpr size_t kStep = 2 * kChunk * R * kEltBytes<Ty>;
  const char* p = next + size_t(c) * R * kEltBytes<Ty>;
  for (size_t l = 0; l < kStep; l += 64) _mm_prefetch(p + l, _MM_HINT_T0);
}

#define KVZIP_HALF_AVX2 __attribute__((target("avx2,fma,f16c")))
#define KVZIP_HALF_AVX512 __attribute__((target("avx512f,avx512bw,avx2,fma,f16c")))

// The last, partial chunk of a row or of x as sixteen floats, zero past n.
template <GgmlType Ty>
inline void tail16(const uint8_t* row, const float* x, uint32_t c, uint32_t n, float* w16,
                   float* x16) {
  for (uint32_t l = 0; l < kChunk; ++l) {
    w16[l] = c + l < n ? weight<Ty>(row, c + l) : 0.0f;
    x16[l] = c + l < n ? x[c + l] : 0.0f;
  }
}

// ---- AVX2: lanes 0-7 and 8-15 of s in two vectors ----

template <GgmlType Ty>
KVZIP_HALF_AVX2 inline __m256 load8(const uint8_t* row, uint32_t i) {
  if constexpr (Ty == GgmlType::F32)
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i);
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * size_t(i)));
  if constexpr (Ty == GgmlType::F16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

KVZIP_HALF_AVX2 inline float fold_avx2(__m256 lo, __m256 hi) {
  const __m256 s8 = _mm256_add_ps(lo, hi);
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

template <GgmlType Ty, int R>
KVZIP_HALF_AVX2 void group_avx2(const MatmulArgs& a, uint32_t r, const char* next) {
  const uint32_t n = a.w.cols, full = n / kChunk * kChunk;
  const uint8_t* row[R];
  for (int i = 0; i < R; ++i) row[i] = row_ptr(a.w, r + i);
  for (uint32_t t = 0; t < a.T; ++t) {
    const float* x = a.x + size_t(t) * n;
    __m256 lo[R], hi[R];
    for (int i = 0; i < R; ++i) lo[i] = hi[i] = _mm256_setzero_ps();
    for (uint32_t c = 0; c < full; c += kChunk) {
      if (t == 0) prefetch_next<Ty, R>(next, c);
      const __m256 x0 = _mm256_loadu_ps(x + c), x1 = _mm256_loadu_ps(x + c + 8);
      for (int i = 0; i < R; ++i) {
        lo[i] = _mm256_fmadd_ps(load8<Ty>(row[i], c), x0, lo[i]);
        hi[i] = _mm256_fmadd_ps(load8<Ty>(row[i], c + 8), x1, hi[i]);
      }
    }
    for (int i = 0; i < R; ++i) {
      if (full < n) {
        alignas(32) float w16[16], x16[16];
        tail16<Ty>(row[i], x, full, n, w16, x16);
        lo[i] = _mm256_fmadd_ps(_mm256_load_ps(w16), _mm256_load_ps(x16), lo[i]);
        hi[i] = _mm256_fmadd_ps(_mm256_load_ps(w16 + 8), _mm256_load_ps(x16 + 8), hi[i]);
      }
      a.y[size_t(t) * a.w.rows + r + i] = fold_avx2(lo[i], hi[i]);
    }
  }
}

template <GgmlType Ty>
KVZIP_HALF_AVX2 void rows_avx2(const MatmulArgs& a, uint32_t r0, uint32_t r1) {
  uint32_t r = r0;
  for (; r + 4 <= r1; r += 4) group_avx2<Ty, 4>(a, r, next_group<4>(a.w, r, r1));
  for (; r < r1; ++r) group_avx2<Ty, 1>(a, r, nullptr);
}

// ---- AVX-512: s in one vector ----

template <GgmlType Ty>
KVZIP_HALF_AVX512 inline __m512 load16(const uint8_t* row, uint32_t i) {
  if constexpr (Ty == GgmlType::F32)
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + i);
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * size_t(i)));
  if constexpr (Ty == GgmlType::F16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

KVZIP_HALF_AVX512 inline float fold_avx512(__m512 s) {
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(s),
                                  _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1)));
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

template <GgmlType Ty, int R>
KVZIP_HALF_AVX512 void group_avx512(const MatmulArgs& a, uint32_t r, const char* next) {
  const uint32_t n = a.w.cols, full = n / kChunk * kChunk;
  const uint8_t* row[R];
  for (int i = 0; i < R; ++i) row[i] = row_ptr(a.w, r + i);
  for (uint32_t t = 0; t < a.T; ++t) {
    const float* x = a.x + size_t(t) * n;
    __m512 s[R];
    for (int i = 0; i < R; ++i) s[i] = _mm512_setzero_ps();
    for (uint32_t c = 0; c < full; c += kChunk) {
      if (t == 0) prefetch_next<Ty, R>(next, c);
      const __m512 xv = _mm512_loadu_ps(x + c);
      for (int i = 0; i < R; ++i) s[i] = _mm512_fmadd_ps(load16<Ty>(row[i], c), xv, s[i]);
    }
    for (int i = 0; i < R; ++i) {
      if (full < n) {
        alignas(64) float w16[16], x16[16];
        tail16<Ty>(row[i], x, full, n, w16, x16);
        s[i] = _mm512_fmadd_ps(_mm512_load_ps(w16), _mm512_load_ps(x16), s[i]);
      }
      a.y[size_t(t) * a.w.rows + r + i] = fold_avx512(s[i]);
    }
  }
}

template <GgmlType Ty>
KVZIP_HALF_AVX512 void rows_avx512(const MatmulArgs& a, uint32_t r0, uint32_t r1) {
  uint32_t r = r0;
  // Decode (one token) two rows at a time: two row streams and the next pair's run stream at 93-95%
  // of the read bandwidth where four rows' reach 74-77% (F16, 1B-shaped layers, two threads,
  // bench_decode), and two FMA chains a thread still compute ~60 GB/s. More tokens share each
  // weight load among four rows.
  if (a.T == 1)
    for (; r + 2 <= r1; r += 2) group_avx512<Ty, 2>(a, r, next_group<2>(a.w, r, r1));
  for (; r + 4 <= r1; r += 4) group_avx512<Ty, 4>(a, r, next_group<4>(a.w, r, r1));
  for (; r < r1; ++r) group_avx512<Ty, 1>(a, r, nullptr);
}

#endif  // KVZIP_HALF_X86

}  // namespace

HalfRowsFn half_rows_portable(GgmlType t) {
  return pick_type(t, [](auto T) -> HalfRowsFn { return rows_portable<decltype(T)::value>; });
}

HalfRowsFn half_rows_avx2(GgmlType t) {
#if KVZIP_HALF_X86
  if (cpu_has_avx2())
    return pick_type(t, [](auto T) -> HalfRowsFn { return rows_avx2<decltype(T)::value>; });
#endif
  (void)t;
  return nullptr;
}

HalfRowsFn half_rows_avx512(GgmlType t) {
#if KVZIP_HALF_X86
  if (cpu_has_avx512())
    return pick_type(t, [](auto T) -> HalfRowsFn { return rows_avx512<decltype(T)::value>; });
#endif
  (void)t;
  return nullptr;
}

}  // namespace kvzip::kernels::cpu::detail
