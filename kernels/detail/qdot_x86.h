// Private to kernels/cpu/qdot_x86.cc and qdot_avx512.cc: the AVX2 decoders of the weight groups
// the 8-bit-activation kernels read (kernels/detail/qdot_rows.h gives the block layouts and the
// scalar decoder these equal). Compiled with function target attributes; callers run them only
// on CPUs that report AVX2, FMA and F16C (AVX-512 callers inline them: their target is a superset).
#pragma once

#include "kernels/detail/qdot_rows.h"
#include "kernels/detail/qgemv_rows.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define KVZIP_QDOT_X86 1
#include <immintrin.h>
#endif

#if KVZIP_QDOT_X86
#define KVZIP_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace kvzip::kernels::cpu::detail {
namespace x86 {

using quant::GgmlType;

KVZIP_AVX2 inline float half_f16c(const uint8_t* p) { return _cvtsh_ss(load_u16(p)); }

// 0xFF in byte i where bit i of x is set, else 0.
KVZIP_AVX2 inline __m256i bits_to_bytes(uint32_t x) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(int(x)), _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101,
                                                    0x0202020202020202, 0x0303030303030303));
  const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201ULL));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

// 16 bytes of packed nibbles -> 32 bytes: low nibbles (elements 0..15), then high (16..31).
// The bytes are loaded into both halves (a broadcast load) and the halves picked by a blend: no
// shuffle-port work, which the register tiles are short of.
KVZIP_AVX2 inline __m256i nibbles32(const uint8_t* p) {
  const __m256i raw =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_and_si256(_mm256_blend_epi32(raw, _mm256_srli_epi16(raw, 4), 0xF0),
                          _mm256_set1_epi8(15));
}

// Q6_K group g's 6-bit values q (0..63) before the −32 offset: the low 4 bits from ql, the top 2
// from qh (QFmt<Q6_K>::ints).
KVZIP_AVX2 inline __m256i q6k_ints_unsigned(const uint8_t* b, int g) {
  const int n = g / 4, k = g % 4;
  const __m256i raw =
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 64 * n + 32 * (k & 1)));
  const __m256i lo =
      _mm256_and_si256(k < 2 ? raw : _mm256_srli_epi16(raw, 4), _mm256_set1_epi8(15));
  const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * n));
  // Bits 2k, 2k+1 of each qh byte to bits 4, 5 by one 16-bit shift, then a mask per byte (it
  // drops what the shift carries across a byte).
  const __m256i hs = k < 2 ? _mm256_sll_epi16(qh, _mm_cvtsi32_si128(4 - 2 * k))
                           : _mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * k - 4));
  return _mm256_or_si256(lo, _mm256_and_si256(hs, _mm256_set1_epi8(0x30)));
}

// The integer weights of group g of a block (what QFmt<Ty>::ints gives, as 32 int8).
template <GgmlType Ty>
KVZIP_AVX2 inline __m256i group_ints(const uint8_t* b, int g) {
  const __m256i low4 = _mm256_set1_epi8(15);
  if constexpr (Ty == GgmlType::Q4_0) {
    return nibbles32(b + 2);
  } else if constexpr (Ty == GgmlType::Q4_1) {
    return nibbles32(b + 4);
  } else if constexpr (Ty == GgmlType::Q5_0) {
    const __m256i hb = _mm256_and_si256(bits_to_bytes(rd32le(b + 2)), _mm256_set1_epi8(16));
    return _mm256_or_si256(nibbles32(b + 6), hb);
  } else if constexpr (Ty == GgmlType::Q5_1) {
    const __m256i hb = _mm256_and_si256(bits_to_bytes(rd32le(b + 4)), _mm256_set1_epi8(16));
    return _mm256_or_si256(nibbles32(b + 8), hb);
  } else if constexpr (Ty == GgmlType::Q8_0) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2));
  } else if constexpr (Ty == GgmlType::Q4_K || Ty == GgmlType::Q5_K) {
    constexpr bool kQ5 = Ty == GgmlType::Q5_K;
    const __m256i raw =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + (kQ5 ? 48 : 16) + 32 * (g / 2)));
    __m256i w = _mm256_and_si256((g & 1) ? _mm256_srli_epi16(raw, 4) : raw, low4);
    if constexpr (kQ5) {
      // Bit g of each qh byte to bit 4 by one 16-bit shift (the bits it carries across a byte
      // are masked off): two operations where a compare against the bit takes three.
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16));
      const __m256i h = g < 4 ? _mm256_sll_epi16(qh, _mm_cvtsi32_si128(4 - g))
                              : _mm256_srl_epi16(qh, _mm_cvtsi32_si128(g - 4));
      w = _mm256_or_si256(w, _mm256_and_si256(h, _mm256_set1_epi8(16)));
    }
    return w;
  } else {  // Q6_K
    return _mm256_sub_epi8(q6k_ints_unsigned(b, g), _mm256_set1_epi8(32));
  }
}

}  // namespace x86
}  // namespace kvzip::kernels::cpu::detail
#endif
