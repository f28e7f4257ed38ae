// Host-side bf16 conversion (kernels/gpu.h): weights are rounded once at load, on the host, so the
// same function serves CPU-only builds (tests of the rounding) and CUDA builds.
#include <string>

#include "common/error.h"
#include "common/half.h"
#include "kernels/gpu.h"

namespace kvzip::kernels::gpu {

std::vector<uint16_t> to_bf16(const float* x, size_t n) {
  std::vector<uint16_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = f32_to_bf16(x[i]);
  return out;
}

void throw_buffer_overflow(size_t n, size_t capacity) {
  throw Error(Errc::internal, "GpuBuffer: " + std::to_string(n) +
                                  " elements copied into a buffer of " + std::to_string(capacity));
}

}  // namespace kvzip::kernels::gpu
