// Attention statistics front (CPU): for a set of query tokens and, per KV head, a key axis of up to
// three contiguous row ranges (the last one causal), the softmax probabilities of every query row
// of the GQA group over that axis, reduced per key column (max or sum) over all rows and combined
// into an output slice. The prefill observers of the SnapKV and H2O scorers use it (spec/methods.md
// §2). CPU only: the GPU path scores KVzip alone, with attention_score_max (kernels/
// attention_score.h, whose key-axis types this op shares); a Cuda Exec throws Errc::unsupported.
#pragma once
#include <cstdint>

#include "kernels/attention_score.h"
#include "kernels/device.h"

namespace kvzip::kernels {

enum class Reduce : uint8_t { Max, Sum };

struct AttentionStatsArgs {
  const float* q = nullptr;  // (T, Hq, D) post-RoPE queries
  uint32_t T = 0, Hq = 0, Hkv = 0, D = 0;
  float scale = 0.0f;                  // logit scale, 1/sqrt(D)
  uint32_t t0 = 0, t1 = 0;             // query tokens [t0, t1) take part
  const ScoreKeyAxis* axes = nullptr;  // (Hkv); query token i sees the fixed ranges and the
                                       // first causal_base + i + 1 rows of the last range
  uint32_t col0 = 0, col1 = 0;         // columns of the key axis to reduce
  Reduce reduce = Reduce::Max;
  float* out = nullptr;     // (Hkv, out_stride): out[h·out_stride + c − col0] is
  uint64_t out_stride = 0;  // combined (max or +=) with the reduction of column c
};

namespace cpu {
// Tiles of query tokens (q·Kᵀ by sgemm, vectorised softmax): memory O(tile rows × key axis), never
// O(T × keys). Splits (KV head, query tiles) over the pool (null: serial); OpenBLAS runs
// single-threaded inside the tasks and is set back to the pool's size afterwards.
void attention_stats(ThreadPool* pool, const AttentionStatsArgs& a);
}  // namespace cpu

inline void attention_stats(const Exec& ex, const AttentionStatsArgs& a) {
  require_cpu(ex, "attention_stats");
  cpu::attention_stats(ex.pool, a);
}

}  // namespace kvzip::kernels
