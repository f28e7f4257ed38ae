// The Walsh–Hadamard rotation (common/hadamard.h). Plain scalar butterflies: n·log2(n) additions
// per row (384 at n = 64), small next to the work on a row anywhere it is used; the compiler may
// vectorize the inner loop, which does not change a bit (every output is one addition).
#include "common/hadamard.h"

#include <cmath>

#include "common/error.h"

namespace kvzip {

bool hadamard_size(uint64_t n) { return n >= 2 && n <= (uint64_t{1} << 31) && (n & (n - 1)) == 0; }

float hadamard_scale(uint32_t n) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(n))); }

void hadamard_rotate(float* x, uint32_t n) {
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

}  // namespace kvzip
