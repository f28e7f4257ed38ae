// RoPE front, canonical half-split order (common/model_config.h): for each head vector x (D) and
// pair i < D/2, (x[i], x[i+D/2]) is rotated by the angle pos·inv_freq[i].
// inv_freq[i] = base^(-2i/D), adjusted by the model's RopeScaling (linear: divided by factor;
// llama3: the piecewise wavelength rule of Llama 3.1). Angles are formed in fp32 as pos·inv_freq
// (as Hugging Face does), their cos/sin computed in double and rounded; tables are built once per
// chunk of positions and shared by all layers and heads.
#pragma once
#include <cstdint>
#include <vector>

#include "common/model_config.h"
#include "kernels/device.h"

namespace kvzip::kernels {

// The D/2 inverse frequencies. Throws Errc::invalid_argument for an odd or zero D, a base <= 1,
// or scaling fields out of range (factor <= 0; llama3 with high_freq_factor <= low_freq_factor or
// original_context == 0).
std::vector<float> rope_inv_freq(uint32_t D, float base, const RopeScaling& scaling);

// cos/sin of every (position, pair).
struct RopeTable {
  uint32_t T = 0;
  uint32_t half = 0;       // D/2
  std::vector<float> cos;  // (T, D/2)
  std::vector<float> sin;  // (T, D/2)
};

// Fills `out` for positions[0..T).
void build_rope_table(const std::vector<float>& inv_freq, const uint32_t* positions, uint32_t T,
                      RopeTable* out);

struct RopeArgs {
  float* x = nullptr;          // (T, H, D), rotated in place
  const float* cos = nullptr;  // (T, D/2)
  const float* sin = nullptr;  // (T, D/2)
  uint32_t T = 0;
  uint32_t H = 0;
  uint32_t D = 0;
};

namespace cpu {
void rope(ThreadPool* pool, const RopeArgs& a);
}
namespace cuda {  // kernels/cuda/rope.cu; x, cos and sin are device memory
void rope(const RopeArgs& a, void* stream);
}

inline void rope(const Exec& ex, const RopeArgs& a) {
#if KVZIP_HAVE_CUDA
  if (ex.device == Device::Cuda) return cuda::rope(a, ex.stream);
#endif
  require_cpu(ex, "rope");
  cpu::rope(ex.pool, a);
}

}  // namespace kvzip::kernels
