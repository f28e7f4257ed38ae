// CPU-internal vector helpers for kernels/cpu/*.cc (not part of any op's API). Written with GCC/
// Clang vector extensions so one source compiles to AVX-512, AVX2, SSE or NEON: VecF holds kLanes
// floats (16 with AVX-512, 8 with AVX/AVX2, else 4: SSE, NEON). Loads/stores are unaligned. exp_vec
// is a Cephes-style polynomial exp with ~2 ulp error over [-87, 88]; inputs above 88 give e^88;
// inputs below -87.3 give ~1e-38, not 0.
#pragma once
#include <cstdint>
#include <cstring>

// Each vector width gets its own inline namespace, so a file compiled for a wider ISA than the
// build's (kernels/cpu/attention_avx512.cc) has helpers of its own instead of two different bodies
// under one name. Such a file defines KVZIP_SIMD_AVX512 before including this header under an
// AVX-512 target pragma (GCC does not define __AVX512F__ for a pragma).
#if defined(__AVX512F__) || defined(KVZIP_SIMD_AVX512)
#define KVZIP_SIMD_ABI lanes16
#elif defined(__AVX__)
#define KVZIP_SIMD_ABI lanes8
#else
#define KVZIP_SIMD_ABI lanes4
#endif

namespace kvzip::kernels::simd {
inline namespace KVZIP_SIMD_ABI {

#if defined(__AVX512F__) || defined(KVZIP_SIMD_AVX512)
inline constexpr int kLanes = 16;
#elif defined(__AVX__)
inline constexpr int kLanes = 8;
#else
inline constexpr int kLanes = 4;  // one 128-bit register; wider types would change the ABI
#endif

typedef float VecF __attribute__((vector_size(kLanes * sizeof(float))));
typedef int32_t VecI __attribute__((vector_size(kLanes * sizeof(int32_t))));

inline VecF load(const float* p) {
  VecF v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, VecF v) { std::memcpy(p, &v, sizeof v); }
// Broadcast. Written as x - 0 (an exact identity, even for -0.0) so it compiles to one
// vbroadcastss; 0 + x would need a real add to turn -0.0 into +0.0.
inline VecF splat(float x) { return x - VecF{}; }
// Forces v into a register. Micro-kernels load a vector once and use it in several FMAs; left
// alone, GCC folds the load into every FMA and the kernel becomes load-bound.
inline void pin(VecF& v) {
#if defined(__AVX__)
  asm("" : "+v"(v));
#else
  (void)v;
#endif
}

inline VecF vmax(VecF a, VecF b) { return a > b ? a : b; }
inline VecF vmin(VecF a, VecF b) { return a < b ? a : b; }

inline float hsum(VecF v) {
  float s = 0.0f;
  for (int i = 0; i < kLanes; ++i) s += v[i];
  return s;
}
inline float hmax(VecF v) {
  float m = v[0];
  for (int i = 1; i < kLanes; ++i) m = v[i] > m ? v[i] : m;
  return m;
}

// e^x per lane. Range reduction x = n·ln2 + r with |r| <= ln2/2, a degree-6 polynomial for e^r,
// and 2^n built in the exponent bits.
inline VecF exp_vec(VecF x) {
  x = vmin(vmax(x, splat(-87.3f)), splat(88.0f));
  const VecF magic = splat(12582912.0f);  // 1.5·2^23: adding it rounds to an integer
  VecF t = x * splat(1.44269504088896341f) + magic;
  VecF n = t - magic;
  VecF r = x - n * splat(0.693359375f);
  r = r - n * splat(-2.12194440e-4f);
  VecF p = splat(1.9875691500e-4f);
  p = p * r + splat(1.3981999507e-3f);
  p = p * r + splat(8.3334519073e-3f);
  p = p * r + splat(4.1665795894e-2f);
  p = p * r + splat(1.6666665459e-1f);
  p = p * r + splat(5.0000001201e-1f);
  VecF y = p * r * r + r + splat(1.0f);
  VecI ni = __builtin_convertvector(n, VecI);
  VecI bits = (ni + 127) << 23;
  VecF scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return y * scale;
}

inline float exp_scalar(float x) {
  VecF v = exp_vec(splat(x));
  return v[0];
}

// Largest of x[0..n), n >= 1.
inline float row_max(const float* x, uint32_t n) {
  uint32_t j = 0;
  float mx = x[0];
  if (n >= uint32_t(kLanes)) {
    VecF m = load(x);
    for (j = kLanes; j + kLanes <= n; j += kLanes) m = vmax(m, load(x + j));
    mx = hmax(m);
  }
  for (; j < n; ++j) mx = x[j] > mx ? x[j] : mx;
  return mx;
}

// x[i] = e^(x[i] - m) in place for i < n; returns their sum.
inline float exp_sum(float* x, uint32_t n, float m) {
  const VecF mv = splat(m);
  VecF s{};
  uint32_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const VecF e = exp_vec(load(x + i) - mv);
    store(x + i, e);
    s += e;
  }
  float r = hsum(s);
  for (; i < n; ++i) r += (x[i] = exp_scalar(x[i] - m));
  return r;
}

// x = softmax(x) over x[0..n), n >= 1, in fp32 with the maximum subtracted.
inline void softmax(float* x, uint32_t n) {
  const float inv = 1.0f / exp_sum(x, n, row_max(x, n));
  const VecF iv = splat(inv);
  uint32_t i = 0;
  for (; i + kLanes <= n; i += kLanes) store(x + i, load(x + i) * iv);
  for (; i < n; ++i) x[i] *= inv;
}

}  // namespace KVZIP_SIMD_ABI
}  // namespace kvzip::kernels::simd
#undef KVZIP_SIMD_ABI
