// SwiGLU front: y = silu(gate) * up elementwise, silu(g) = g / (1 + e^-g). y may equal gate.
#pragma once
#include <cstddef>

#include "kernels/device.h"

namespace kvzip {

struct SwigluArgs {
  const float* gate = nullptr;  // (n) — typically (T, F) flattened
  const float* up = nullptr;    // (n)
  float* y = nullptr;           // (n); may be gate or up
  size_t n = 0;
};

namespace cpu {
void swiglu(ThreadPool* pool, const SwigluArgs& a);
}

inline void swiglu(const Exec& ex, const SwigluArgs& a) {
  require_cpu(ex, "swiglu");
  cpu::swiglu(ex.pool, a);
}

}  // namespace kvzip
