// KVzip score kernel front (spec/methods.md §1 step 5) — the device twin of
// kernels/attention_stats.h with Reduce::Max. For every KV head h the key axis is the
// concatenation of up to three row ranges (prefix P, document chunk c_t, and last the causal range
// of R_t's own keys); query token i sees the fixed ranges and the first causal_base + i + 1 rows
// of the causal one. For each query row of the GQA group the softmax over that LOCAL axis is
// formed, and for each column c in [col0, col1) (inside the fixed ranges) the max over the group's
// rows and all T tokens is combined into out[h · out_stride + c - col0] by max. Two passes, both
// in 32×32 tiles: (1) per row the log-sum-exp over the axis (online), (2) per column block the max
// of exp(logit - lse) over every row — no T×keys matrix is formed. CUDA only (the CPU side is
// attention_stats); pointers are device memory, `axes` a HOST array.
#pragma once
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/device.h"

namespace kvzip::kernels {

struct ScoreKeyRange {
  const float* k = nullptr;  // (n, D) post-RoPE keys, 16-byte aligned
  uint32_t n = 0;            // rows (the causal range: rows the LAST query token sees)
};

struct ScoreKeyAxis {
  ScoreKeyRange ranges[3];
  uint32_t n_ranges = 0;     // 1..3; the last one is causal
  uint32_t causal_base = 0;  // query token i sees causal_base + i + 1 rows of the last range
};

struct AttentionScoreArgs {
  const float* q = nullptr;  // (T, Hq, D) post-RoPE queries
  uint32_t T = 0, Hq = 0, Hkv = 0, D = 0;
  float scale = 0.0f;                  // logit scale, 1/sqrt(D)
  const ScoreKeyAxis* axes = nullptr;  // (Hkv), host array
  uint32_t col0 = 0, col1 = 0;  // columns reduced; col1 <= the fixed ranges' rows of every head
  float* out = nullptr;         // (Hkv, out_stride), combined by max (probabilities >= 0)
  uint64_t out_stride = 0;
};

namespace cuda {
void attention_score_max(const AttentionScoreArgs& a, void* stream);
}

inline void attention_score_max(const Exec& ex, const AttentionScoreArgs& a) {
#if KVZIP_HAVE_CUDA
  if (ex.device == Device::Cuda) return cuda::attention_score_max(a, ex.stream);
#endif
  throw_unsupported_device(ex.device, "attention_score_max");
}

}  // namespace kvzip::kernels
