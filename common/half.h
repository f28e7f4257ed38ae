// The one definition of kvzip's 16-bit float conversions (IEEE binary16 "f16" and bfloat16 "bf16"),
// used by the model loader and kernels (GGUF F16/BF16 tensors, block scales), the .kvz codec and
// the GPU weight upload. Scalar and bit-exact; vector paths (F16C, CUDA) are tested against these.
// Semantics follow the x86 conversion instructions, so scalar and vector paths agree bit for bit:
//  - f32 -> f16 / bf16 rounds to nearest, ties to even; overflow goes to infinity; f16
//    subnormals are produced exactly.
//  - NaN stays NaN and comes out quiet, with the sign and the top payload bits kept (a signalling
//    NaN is quieted, as vcvtph2ps / vcvtps2ph do). Every non-NaN f16 and bf16 value survives
//    f16/bf16 -> f32 -> f16/bf16 unchanged.
#pragma once
#include <bit>
#include <cstdint>

namespace kvzip {

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
  if (exp == 0) {  // zero or subnormal: mant · 2^-24, exact in fp32
    const float f = float(mant) * 0x1p-24f;
    return sign ? -f : f;
  }
  if (exp == 0x1F)  // infinity, or NaN made quiet with its payload kept
    return std::bit_cast<float>(sign | 0x7F800000u | (mant << 13) | (mant ? 0x400000u : 0u));
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline uint16_t f32_to_f16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  x &= 0x7FFFFFFFu;
  if (x > 0x7F800000u) return uint16_t(sign | 0x7E00u | ((x >> 13) & 0x3FFu));  // quiet NaN
  if (x >= 0x477FF000u) return uint16_t(sign | 0x7C00u);  // rounds to >= 65520: infinity
  if (x < 0x38800000u) {                                  // below 2^-14: f16 subnormal or zero
    if (x < 0x33000000u) return sign;                     // <= 2^-25 rounds (to even) to zero
    const uint32_t e = x >> 23, m = (x & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - e;  // value = m · 2^(e-150) = (m >> shift) units of 2^-24
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
    return uint16_t(sign | r);
  }
  uint32_t r = ((x >> 23) - 112) << 10 | ((x & 0x7FFFFFu) >> 13);
  const uint32_t rem = x & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1))) ++r;  // a carry into the exponent is correct
  return uint16_t(sign | r);
}

// bfloat16 is the top half of a binary32.
inline float bf16_to_f32(uint16_t b) { return std::bit_cast<float>(uint32_t(b) << 16); }

inline uint16_t f32_to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((u >> 16) | 0x40u);  // quiet NaN
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);  // overflow to inf is correct rounding
}

}  // namespace kvzip
