// AVX2 block decoders for quant::dequantize_row (kernels/detail/dequant_x86.h), compiled with
// function target attributes so any x86-64 build has them; quant.cc uses them only when the CPU
// reports AVX2, FMA and F16C, and keeps its portable scalar decoders as the reference the tests
// compare these with. Eight values at a time: bytes widened to int32, converted to float, scaled.
// Products and sums are written as separate multiply and add (no FMA), as the scalar code states
// them, so both give the same values up to the compiler contracting the scalar code.
#include "kernels/detail/dequant_x86.h"

#include <cstring>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define KVZIP_DEQ_X86 1
#include <immintrin.h>
#endif

namespace kvzip::kernels::quant::detail {

#if KVZIP_DEQ_X86
namespace {

#define KVZIP_AVX2 __attribute__((target("avx2,fma,f16c")))

KVZIP_AVX2 inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Eight bytes at p widened to int32 (unsigned).
KVZIP_AVX2 inline __m256i u8x8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// y[0..8) = float(q) * d + m.
KVZIP_AVX2 inline void store_affine(float* y, __m256i q, __m256 d, __m256 m) {
  _mm256_storeu_ps(y, _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(q), d), m));
}
KVZIP_AVX2 inline void store_scaled(float* y, __m256i q, __m256 d) {
  _mm256_storeu_ps(y, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
}

// The 16 nibble pairs of a 32-element block: lo[j] -> element j, hi[j] -> element j + 16.
template <bool kFifthBit, bool kOffset>
KVZIP_AVX2 void q4q5_block(const uint8_t* qs, uint32_t qh, float dv, float mv, int sub, float* y) {
  const __m256 d = _mm256_set1_ps(dv), m = _mm256_set1_ps(mv);
  const __m256i mask = _mm256_set1_epi32(15), bias = _mm256_set1_epi32(sub);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int j0 = 0; j0 < 16; j0 += 8) {
    const __m256i raw = u8x8(qs + j0);
    __m256i lo = _mm256_and_si256(raw, mask), hi = _mm256_srli_epi32(raw, 4);
    if constexpr (kFifthBit) {
      const __m256i one = _mm256_set1_epi32(1);
      const __m256i bl =
          _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(int(qh >> j0)), lane), one);
      const __m256i bh =
          _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(int(qh >> (j0 + 16))), lane), one);
      lo = _mm256_or_si256(lo, _mm256_slli_epi32(bl, 4));
      hi = _mm256_or_si256(hi, _mm256_slli_epi32(bh, 4));
    }
    if constexpr (kOffset) {
      store_affine(y + j0, lo, d, m);
      store_affine(y + j0 + 16, hi, d, m);
    } else {
      store_scaled(y + j0, _mm256_sub_epi32(lo, bias), d);
      store_scaled(y + j0 + 16, _mm256_sub_epi32(hi, bias), d);
    }
  }
}

KVZIP_AVX2 void deq_q4_0(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 18, y += 32)
    q4q5_block<false, false>(b + 2, 0, half_at(b), 0, 8, y);
}
KVZIP_AVX2 void deq_q4_1(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 20, y += 32)
    q4q5_block<false, true>(b + 4, 0, half_at(b), half_at(b + 2), 0, y);
}
KVZIP_AVX2 void deq_q5_0(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 22, y += 32) {
    uint32_t qh;
    std::memcpy(&qh, b + 2, 4);
    q4q5_block<true, false>(b + 6, qh, half_at(b), 0, 16, y);
  }
}
KVZIP_AVX2 void deq_q5_1(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 24, y += 32) {
    uint32_t qh;
    std::memcpy(&qh, b + 4, 4);
    q4q5_block<true, true>(b + 8, qh, half_at(b), half_at(b + 2), 0, y);
  }
}
KVZIP_AVX2 void deq_q8_0(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += 34, y += 32) {
    const __m256 d = _mm256_set1_ps(half_at(b));
    for (int j = 0; j < 32; j += 8)
      store_scaled(
          y + j, _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + j))),
          d);
  }
}

// Q4_K (144 B) and Q5_K (176 B): y = d·sc·q − dmin·m per 32-element sub-block.
template <bool kQ5>
KVZIP_AVX2 void deq_k45(const uint8_t* b, float* y, int64_t nb) {
  constexpr int bb = kQ5 ? 176 : 144;
  const __m256i mask = _mm256_set1_epi32(15), one = _mm256_set1_epi32(1);
  for (int64_t i = 0; i < nb; ++i, b += bb, y += 256) {
    const float d = half_at(b), dmin = half_at(b + 2);
    const uint8_t* scales = b + 4;
    const uint8_t* qh = b + 16;
    const uint8_t* qs = b + (kQ5 ? 48 : 16);
    for (int c = 0; c < 4; ++c) {
      int sc1, m1, sc2, m2;
      scale_min_k4(2 * c, scales, sc1, m1);
      scale_min_k4(2 * c + 1, scales, sc2, m2);
      const __m256 d1 = _mm256_set1_ps(d * float(sc1)), mm1 = _mm256_set1_ps(-(dmin * float(m1)));
      const __m256 d2 = _mm256_set1_ps(d * float(sc2)), mm2 = _mm256_set1_ps(-(dmin * float(m2)));
      for (int l = 0; l < 32; l += 8) {
        const __m256i raw = u8x8(qs + 32 * c + l);
        __m256i lo = _mm256_and_si256(raw, mask), hi = _mm256_srli_epi32(raw, 4);
        if constexpr (kQ5) {
          const __m256i h = u8x8(qh + l);
          lo = _mm256_or_si256(
              lo, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 2 * c), one), 4));
          hi = _mm256_or_si256(
              hi, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 2 * c + 1), one), 4));
        }
        store_affine(y + 64 * c + l, lo, d1, mm1);
        store_affine(y + 64 * c + 32 + l, hi, d2, mm2);
      }
    }
  }
}

// Q6_K (210 B): ql[128], qh[64], int8 scales[16], half d (last); q = 6-bit value − 32.
KVZIP_AVX2 void deq_q6_k(const uint8_t* b, float* y, int64_t nb) {
  const __m256i m4 = _mm256_set1_epi32(15), m2 = _mm256_set1_epi32(3), k32 = _mm256_set1_epi32(32);
  for (int64_t i = 0; i < nb; ++i, b += 210, y += 256) {
    const float d = half_at(b + 208);
    for (int n = 0; n < 2; ++n) {
      const uint8_t* ql = b + 64 * n;
      const uint8_t* qh = b + 128 + 32 * n;
      const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192) + 8 * n;
      float* out = y + 128 * n;
      for (int l = 0; l < 32; l += 8) {
        const int is = l / 16;
        const __m256i a = u8x8(ql + l), c = u8x8(ql + 32 + l), h = u8x8(qh + l);
        auto six = [&](__m256i low4, int shift) {
          const __m256i hb = _mm256_and_si256(_mm256_srli_epi32(h, shift), m2);
          return _mm256_sub_epi32(_mm256_or_si256(low4, _mm256_slli_epi32(hb, 4)), k32);
        };
        const __m256i q1 = six(_mm256_and_si256(a, m4), 0), q2 = six(_mm256_and_si256(c, m4), 2);
        const __m256i q3 = six(_mm256_srli_epi32(a, 4), 4), q4 = six(_mm256_srli_epi32(c, 4), 6);
        store_scaled(out + l, q1, _mm256_set1_ps(d * float(sc[is + 0])));
        store_scaled(out + l + 32, q2, _mm256_set1_ps(d * float(sc[is + 2])));
        store_scaled(out + l + 64, q3, _mm256_set1_ps(d * float(sc[is + 4])));
        store_scaled(out + l + 96, q4, _mm256_set1_ps(d * float(sc[is + 6])));
      }
    }
  }
}

KVZIP_AVX2 void deq_bf16(const uint8_t* s, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i w =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 2 * i)));
    _mm256_storeu_ps(y + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
  }
  for (; i < n; ++i) {
    const uint32_t u = uint32_t(s[2 * i] | (s[2 * i + 1] << 8)) << 16;
    std::memcpy(y + i, &u, 4);
  }
}

KVZIP_AVX2 void deq_f16(const uint8_t* s, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 2 * i))));
  for (; i < n; ++i) y[i] = half_at(s + 2 * i);
}

}  // namespace

bool dequant_avx2_usable() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                         __builtin_cpu_supports("f16c");
  return ok;
}

// Block decoders take a block count; the plain types (BF16, F16) an element count.
DequantFn dequant_avx2(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0: return deq_q4_0;
    case GgmlType::Q4_1: return deq_q4_1;
    case GgmlType::Q5_0: return deq_q5_0;
    case GgmlType::Q5_1: return deq_q5_1;
    case GgmlType::Q8_0: return deq_q8_0;
    case GgmlType::Q4_K: return deq_k45<false>;
    case GgmlType::Q5_K: return deq_k45<true>;
    case GgmlType::Q6_K: return deq_q6_k;
    case GgmlType::BF16: return deq_bf16;
    case GgmlType::F16: return deq_f16;
    default: return nullptr;
  }
}

#else

bool dequant_avx2_usable() { return false; }
DequantFn dequant_avx2(GgmlType) { return nullptr; }

#endif

}  // namespace kvzip::kernels::quant::detail
