// The Walsh–Hadamard rotation (common/hadamard.h): n·log2(n) additions a row (384 at n = 64). The
// plain butterflies, and on AVX2 CPUs the same butterflies eight lanes at a time: attention over
// rotated q8/q4 rows rotates each query and output row once per stored chunk, which took 6% of a
// decode step with the plain loop (SmolLM2, a q4 file of the whole article). Every output is one
// addition, subtraction or product either way, so both give the same bits.
#include "common/hadamard.h"

#include <cmath>

#include "common/error.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define KVZIP_HADAMARD_X86 1
#include <immintrin.h>
#endif

namespace kvzip {

bool hadamard_size(uint64_t n) { return n >= 2 && n <= (uint64_t{1} << 31) && (n & (n - 1)) == 0; }

float hadamard_scale(uint32_t n) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(n)));
}

void hadamard_rotate_reference(float* x, uint32_t n) {
  KVZIP_ASSERT(hadamard_size(n));
  for (uint32_t h = 1; h < n; h *= 2)
    for (uint32_t i = 0; i < n; i += 2 * h)
      for (uint32_t j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
  const float s = hadamard_scale(n);
  for (uint32_t j = 0; j < n; ++j) x[j] *= s;
}

#if KVZIP_HADAMARD_X86
namespace {

// Steps h = 1, 2, 4 of one run of eight: lane j < j ^ h takes v[j] + v[j ^ h], the other lane
// v[j ^ h] − v[j] (the partner's value first: the reference's a − b), picked by a blend.
__attribute__((target("avx2"))) inline __m256 butterflies8(__m256 v) {
  __m256 p = _mm256_permute_ps(v, 0xB1);  // lanes 1, 0, 3, 2, ...
  v = _mm256_blend_ps(_mm256_add_ps(v, p), _mm256_sub_ps(p, v), 0xAA);
  p = _mm256_permute_ps(v, 0x4E);  // lanes 2, 3, 0, 1, ...
  v = _mm256_blend_ps(_mm256_add_ps(v, p), _mm256_sub_ps(p, v), 0xCC);
  p = _mm256_permute2f128_ps(v, v, 1);  // the 128-bit halves swapped
  return _mm256_blend_ps(_mm256_add_ps(v, p), _mm256_sub_ps(p, v), 0xF0);
}

// The same steps as the reference, each output one IEEE operation on the same two values (the
// steps' order inside one level never matters: a level reads only the level before).
__attribute__((target("avx2"))) void rotate_avx2(float* x, uint32_t n) {
  for (uint32_t j = 0; j < n; j += 8) _mm256_storeu_ps(x + j, butterflies8(_mm256_loadu_ps(x + j)));
  for (uint32_t h = 8; h < n; h *= 2)
    for (uint32_t i = 0; i < n; i += 2 * h)
      for (uint32_t j = i; j < i + h; j += 8) {
        const __m256 a = _mm256_loadu_ps(x + j), b = _mm256_loadu_ps(x + j + h);
        _mm256_storeu_ps(x + j, _mm256_add_ps(a, b));
        _mm256_storeu_ps(x + j + h, _mm256_sub_ps(a, b));
      }
  const __m256 s = _mm256_set1_ps(hadamard_scale(n));
  for (uint32_t j = 0; j < n; j += 8)
    _mm256_storeu_ps(x + j, _mm256_mul_ps(_mm256_loadu_ps(x + j), s));
}

bool have_avx2() {
  static const bool ok = __builtin_cpu_supports("avx2");
  return ok;
}

}  // namespace
#endif

void hadamard_rotate(float* x, uint32_t n) {
  KVZIP_ASSERT(hadamard_size(n));
#if KVZIP_HADAMARD_X86
  if (n >= 8 && have_avx2()) return rotate_avx2(x, n);
#endif
  hadamard_rotate_reference(x, n);
}

}  // namespace kvzip
