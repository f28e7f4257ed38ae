// Host-side bf16 conversion (kernels/gpu.h): weights are rounded once at load, on the host, so the
// same function serves CPU-only builds (tests of the rounding) and CUDA builds.
#include <cstring>
#include <string>

#include "common/error.h"
#include "kernels/gpu.h"

namespace kvzip::gpu {

uint16_t to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0)
    return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN stays a (quiet) NaN
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>((u + rounding) >> 16);
}

float from_bf16(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

std::vector<uint16_t> to_bf16(const float* x, size_t n) {
  std::vector<uint16_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = to_bf16(x[i]);
  return out;
}

void throw_buffer_overflow(size_t n, size_t capacity) {
  throw Error(Errc::internal, "GpuBuffer: " + std::to_string(n) + " elements copied into a buffer of " +
                                  std::to_string(capacity));
}

}  // namespace kvzip::gpu
