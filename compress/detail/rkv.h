// Internal to compress/: the R-KV math (spec/methods.md §4) over one KV head's candidate keys,
// used by the offline "rkv" scorer. Both terms are distributions over the n candidates:
//   importance I: probe logits z[t, j] = max over the group's G query heads of q·k_j·scale,
//     softmax over the candidates per probe token (fp32), mean over the tokens, then a centred
//     max-pool of `kernel` (truncated at the ends);
//   redundancy R: k̂ = k / max(‖k‖, 1e-12); S = k̂ k̂ᵀ with the diagonal zeroed; in each row i the
//     entry of the most recent other candidate (largest j ≠ i) with S_ij > threshold is zeroed;
//     r_j = Σ_i S_ij / n; R = softmax(r).
// Z = λ·I − (1−λ)·R. Memory O(n·D): the column sums come from k̂_j·(Σ_i k̂_i) − k̂_j·k̂_j minus
// the zeroed entries, and the scan that finds each row's zeroed entry runs in tiles from the
// latest candidates backwards, each row dropping out as soon as it has found its entry: a row
// costs O(d·D) for its similar key d candidates back (blocks of 256), O(n·D) when it has none,
// so O(n²·D) time in the worst case (no two keys similar) and O(n·D) when repeats are recent.
#pragma once
#include <cstdint>

namespace kvzip::detail {

// R (n) for keys (n, D), rows in position order.
void rkv_redundancy(const float* k, uint32_t n, uint32_t D, float threshold, float* R);

struct RkvProbe {
  const float* q = nullptr;  // query rows: token t, group head g at q + t·q_stride + g·D
  uint32_t tokens = 0;       // α
  uint64_t q_stride = 0;     // floats between tokens (Hq·D in a (tokens, Hq, D) array)
  uint32_t G = 1, D = 0;
  float scale = 0.0f;        // 1/sqrt(D)
};

// I (n), max-pooled, for keys (n, D).
void rkv_importance(const RkvProbe& probe, const float* k, uint32_t n, uint32_t kernel, float* I);

}  // namespace kvzip::detail
