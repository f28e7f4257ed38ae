// ReST-KV's two dense steps for one query head (spec/methods.md §3): the probe's attention
// probabilities, and the change of the head's projected output when one key is removed,
//   s_j = ā_j/(1−ā_j) · ‖W_o,h (ō − v_j)‖₂,  ō = Σ_j ā_j·v_j  (+inf when ā_j >= 1),
// computed through the D×D Gram matrix W_o,hᵀW_o,h so that no E-sized vector is formed. The
// smoothing around them (EMA, drift window) lives with the scorer in compress/. CPU only (the GPU
// path has no ReST-KV); a Cuda Exec throws Errc::unsupported. One head per call, on the calling
// thread (its sgemm uses OpenBLAS's current thread count).
#pragma once
#include <cstdint>

#include "kernels/device.h"

namespace kvzip::kernels {

struct RestKvProbeArgs {
  const float* q = nullptr;  // probe row t at q + t·q_stride (D floats), t < w
  uint64_t q_stride = 0;
  uint32_t w = 0;            // probe rows: the LAST w of the N keys' positions
  const float* k = nullptr;  // (N, D)
  uint32_t N = 0, D = 0;
  float scale = 0.0f;      // 1/sqrt(D)
  float* probs = nullptr;  // (w, N): row t = softmax over keys [0, N − w + t], zeros after
};

struct RestKvOutputChangeArgs {
  const float* abar = nullptr;  // (N) smoothed probabilities ā
  const float* v = nullptr;     // (N, D) values
  uint32_t N = 0, D = 0;
  uint32_t n = 0;             // s is computed for keys j < n (n <= N)
  const float* wo = nullptr;  // (E, D) the head's column block of W_o, rows wo_stride apart
  uint64_t wo_stride = 0;
  uint32_t E = 0;
  float* out = nullptr;  // (n) s_j
};

namespace cpu {
void restkv_probe(const RestKvProbeArgs& a);
void restkv_output_change(const RestKvOutputChangeArgs& a);
}  // namespace cpu

inline void restkv_probe(const Exec& ex, const RestKvProbeArgs& a) {
  require_cpu(ex, "restkv_probe");
  cpu::restkv_probe(a);
}
inline void restkv_output_change(const Exec& ex, const RestKvOutputChangeArgs& a) {
  require_cpu(ex, "restkv_output_change");
  cpu::restkv_output_change(a);
}

}  // namespace kvzip::kernels
