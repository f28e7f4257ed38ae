// R-KV's two per-head terms (spec/methods.md §4), over one KV head's candidate keys:
//   importance I (scored rows): probe logits z[t, j] = max over the group's G query heads of
//     q·k_j·scale; softmax over the scored rows per probe token (fp32); mean over the tokens;
//     centred max-pool of `kernel` (truncated at the ends);
//   redundancy R (all n candidate rows): k̂ = k/‖k‖ (a zero key stays zero); S = k̂k̂ᵀ with the
//     diagonal zeroed; in each row i the entry of the most recent other row (largest j ≠ i) with
//     S_ij > threshold is zeroed; r_j = Σ_i S_ij / n; R = softmax(r).
// model/rkv.h mixes them (Z = λ·I − (1−λ)·R) for both the decode-time policy and the offline
// scorer. CPU only (the GPU path has no R-KV); a Cuda Exec throws Errc::unsupported. Each call is
// one head on the calling thread (its sgemm uses OpenBLAS's current thread count).
#pragma once
#include <cstdint>

#include "kernels/device.h"

namespace kvzip::kernels {

struct RkvImportanceArgs {
  const float* q = nullptr;  // probe queries: token t, group head g at q + t·q_stride + g·D
  uint32_t tokens = 0;       // α probe tokens, >= 1
  uint64_t q_stride = 0;     // floats between tokens (G·D when contiguous)
  uint32_t G = 1, D = 0;
  float scale = 0.0f;        // 1/sqrt(D)
  const float* k = nullptr;  // (n, D) the scored keys
  uint32_t n = 0;
  uint32_t kernel = 1;   // max-pool width, odd
  float* out = nullptr;  // (n) I
};

struct RkvRedundancyArgs {
  const float* k = nullptr;  // (n, D) every candidate key, in position order
  uint32_t n = 0, D = 0;
  float threshold = 0.5f;  // cosine above which a row counts as a copy
  float* out = nullptr;    // (n) R
};

namespace cpu {
// Importance in column tiles of 2048 keys (one sgemm each): memory O(tokens·n).
void rkv_importance(const RkvImportanceArgs& a);
// Redundancy in O(n·D) memory: the column sums come from k̂_j·(Σ_i k̂_i) − k̂_j·k̂_j minus the
// zeroed entries, and the scan that finds each row's zeroed entry runs in tiles from the latest
// candidates backwards, a row dropping out as soon as it has found its entry: O(d·D) for a
// similar key d rows back, O(n·D) when it has none (O(n²·D) time when no two keys are similar).
void rkv_redundancy(const RkvRedundancyArgs& a);
}  // namespace cpu

inline void rkv_importance(const Exec& ex, const RkvImportanceArgs& a) {
  require_cpu(ex, "rkv_importance");
  cpu::rkv_importance(a);
}
inline void rkv_redundancy(const Exec& ex, const RkvRedundancyArgs& a) {
  require_cpu(ex, "rkv_redundancy");
  cpu::rkv_redundancy(a);
}

}  // namespace kvzip::kernels
