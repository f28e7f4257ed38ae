// x86-64 row kernels of the quantized GEMV (see kernels/detail/qgemv_rows.h), AVX2 and AVX-512,
// compiled with function target attributes so a build without -march (the sanitizer build) still
// has them; qgemv.cc calls them only when the CPU reports the features. Two rows at a time: each
// block of x is loaded once for both, and two independent FMA chains hide the FMA latency that
// one row's single chain would wait on.
// Nibbles are widened to int32 and converted to float: exact, since the weights are
// d·q + m with q in [0, 15] (Q4) or [-128, 127] (Q8), the same values dequantization produces.
#include "kernels/detail/qgemv_rows.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define KVZIP_QGEMV_X86 1
#include <immintrin.h>
// GCC 12 flags the intrinsics' own `__m512 __Y = __Y;` (an intentionally undefined value) as
// maybe-uninitialized once they are inlined into target-attribute functions.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

namespace kvzip::kernels::cpu::detail {

#if KVZIP_QGEMV_X86

#define KVZIP_AVX2 __attribute__((target("avx2,fma,f16c")))
#define KVZIP_AVX512 __attribute__((target("avx512f,avx512bw,avx2,fma,f16c")))

bool cpu_has_avx2() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                         __builtin_cpu_supports("f16c");
  return ok;
}

bool cpu_has_avx512() {
  static const bool ok =
      cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  return ok;
}

namespace {

// Software prefetch distance in bytes. The hardware prefetcher alone leaves one thread at about
// half its streaming rate on a Q8_0 LM head (two interleaved row streams); 1 KiB ahead reaches
// that rate (512 B and 1.5-4 KiB measured slower). Neutral for Q4_1, which is compute-bound at
// ~2 ns per block.
constexpr size_t kPrefetchAhead = 1024;

KVZIP_AVX2 inline float half_f16c(const uint8_t* p) { return _cvtsh_ss(load_u16(p)); }

// ---- AVX2: 8 lanes, a block is four vectors -------------------------------------------------

// Eight int8 at p as floats.
KVZIP_AVX2 inline __m256 widen8_avx2(const uint8_t* p) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
}

// dot(q, x) of one block as 8 partial sums (no scale, no offset); x0..x3 hold its 32 x values.
template <QFormat F>
KVZIP_AVX2 inline __m256 block_avx2(const uint8_t* blk, const __m256 (&x)[4]) {
  __m256 q0, q1, q2, q3;
  if constexpr (F == QFormat::Q8_0) {
    q0 = widen8_avx2(blk + 2), q1 = widen8_avx2(blk + 10);
    q2 = widen8_avx2(blk + 18), q3 = widen8_avx2(blk + 26);
  } else {
    const __m128i raw =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + (F == QFormat::Q4_1 ? 4 : 2)));
    const __m128i mask = _mm_set1_epi8(15);
    const __m128i lo = _mm_and_si128(raw, mask);                     // elements 0..15
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(raw, 4), mask);  // elements 16..31
    q0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo));
    q1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)));
    q2 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi));
    q3 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)));
  }
  __m256 s = _mm256_mul_ps(q0, x[0]);
  s = _mm256_fmadd_ps(q1, x[1], s);
  s = _mm256_fmadd_ps(q2, x[2], s);
  return _mm256_fmadd_ps(q3, x[3], s);
}

KVZIP_AVX2 inline float hsum_avx2(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// R consecutive rows from r: each block's x is loaded once for all R rows, and the R
// accumulator chains run interleaved.
template <QFormat F, int R>
KVZIP_AVX2 inline void rows_r_avx2(const QGemvArgs& a, const float* xsum, uint32_t r) {
  constexpr size_t bb = F == QFormat::Q8_0 ? 34 : F == QFormat::Q4_1 ? 20 : 18;
  const uint32_t nb = a.in / kQBlockElems;
  const uint8_t* row0 = a.w + size_t(r) * nb * bb;
  __m256 acc[R];
  float offset[R];  // Σ m·xsum (Q4 formats)
  for (int k = 0; k < R; ++k) acc[k] = _mm256_setzero_ps(), offset[k] = 0.0f;
  for (uint32_t b = 0; b < nb; ++b) {
    const float* xb = a.x + size_t(b) * kQBlockElems;
    const __m256 x[4] = {_mm256_loadu_ps(xb), _mm256_loadu_ps(xb + 8), _mm256_loadu_ps(xb + 16),
                         _mm256_loadu_ps(xb + 24)};
#pragma GCC unroll 4
    for (int k = 0; k < R; ++k) {
      const uint8_t* blk = row0 + (size_t(k) * nb + b) * bb;
      _mm_prefetch(reinterpret_cast<const char*>(blk) + kPrefetchAhead, _MM_HINT_T0);
      const float d = half_f16c(blk);
      acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(d), block_avx2<F>(blk, x), acc[k]);
      if constexpr (F == QFormat::Q4_1) offset[k] += half_f16c(blk + 2) * xsum[b];
      if constexpr (F == QFormat::Q4_0) offset[k] += -8.0f * d * xsum[b];
    }
  }
  for (int k = 0; k < R; ++k) a.y[r + k] = hsum_avx2(acc[k]) + offset[k];
}

template <QFormat F>
KVZIP_AVX2 void rows_avx2(const QGemvArgs& a, const float* xsum, uint32_t r0, uint32_t r1) {
  uint32_t r = r0;
  for (; r + 2 <= r1; r += 2) rows_r_avx2<F, 2>(a, xsum, r);
  if (r < r1) rows_r_avx2<F, 1>(a, xsum, r);
}

// ---- AVX-512: 16 lanes, a block is two vectors ----------------------------------------------

template <QFormat F>
KVZIP_AVX512 inline __m512 block_avx512(const uint8_t* blk, __m512 x0, __m512 x1) {
  __m512 q0, q1;
  if constexpr (F == QFormat::Q8_0) {
    q0 = _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2))));
    q1 = _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 18))));
  } else {
    const __m512i v = _mm512_cvtepu8_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + (F == QFormat::Q4_1 ? 4 : 2))));
    q0 = _mm512_cvtepi32_ps(_mm512_and_si512(v, _mm512_set1_epi32(15)));  // elements 0..15
    q1 = _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4));                     // elements 16..31
  }
  return _mm512_fmadd_ps(q1, x1, _mm512_mul_ps(q0, x0));
}

template <QFormat F, int R>
KVZIP_AVX512 inline void rows_r_avx512(const QGemvArgs& a, const float* xsum, uint32_t r) {
  constexpr size_t bb = F == QFormat::Q8_0 ? 34 : F == QFormat::Q4_1 ? 20 : 18;
  const uint32_t nb = a.in / kQBlockElems;
  const uint8_t* row0 = a.w + size_t(r) * nb * bb;
  __m512 acc[R];
  float offset[R];
  for (int k = 0; k < R; ++k) acc[k] = _mm512_setzero_ps(), offset[k] = 0.0f;
  for (uint32_t b = 0; b < nb; ++b) {
    const float* xb = a.x + size_t(b) * kQBlockElems;
    const __m512 x0 = _mm512_loadu_ps(xb), x1 = _mm512_loadu_ps(xb + 16);
#pragma GCC unroll 4
    for (int k = 0; k < R; ++k) {
      const uint8_t* blk = row0 + (size_t(k) * nb + b) * bb;
      _mm_prefetch(reinterpret_cast<const char*>(blk) + kPrefetchAhead, _MM_HINT_T0);
      const float d = half_f16c(blk);
      acc[k] = _mm512_fmadd_ps(_mm512_set1_ps(d), block_avx512<F>(blk, x0, x1), acc[k]);
      if constexpr (F == QFormat::Q4_1) offset[k] += half_f16c(blk + 2) * xsum[b];
      if constexpr (F == QFormat::Q4_0) offset[k] += -8.0f * d * xsum[b];
    }
  }
  for (int k = 0; k < R; ++k) a.y[r + k] = _mm512_reduce_add_ps(acc[k]) + offset[k];
}

template <QFormat F>
KVZIP_AVX512 void rows_avx512(const QGemvArgs& a, const float* xsum, uint32_t r0, uint32_t r1) {
  uint32_t r = r0;
  for (; r + 2 <= r1; r += 2) rows_r_avx512<F, 2>(a, xsum, r);
  if (r < r1) rows_r_avx512<F, 1>(a, xsum, r);
}

}  // namespace

QRowsFn qrows_avx2(QFormat f) {
  return pick_qformat(f, [](auto F) -> QRowsFn { return rows_avx2<decltype(F)::value>; });
}

QRowsFn qrows_avx512(QFormat f) {
  return pick_qformat(f, [](auto F) -> QRowsFn { return rows_avx512<decltype(F)::value>; });
}

#else  // no x86 variants in this build

bool cpu_has_avx2() { return false; }
bool cpu_has_avx512() { return false; }
QRowsFn qrows_avx2(QFormat) { return nullptr; }
QRowsFn qrows_avx512(QFormat) { return nullptr; }

#endif

}  // namespace kvzip::kernels::cpu::detail
