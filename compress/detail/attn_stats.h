// Attention statistics for the scorers: for a set of query tokens and, per KV head, a key axis made
// of up to three contiguous row ranges (the last one causal), the softmax probabilities of every
// query row of the GQA group over that axis, reduced per key (max or sum) over all rows and written
// into an output slice. Computed in tiles of query tokens (q·Kᵀ with sgemm, vectorised softmax),
// so memory is O(tile rows × key axis), never O(T × keys) for all queries.
#pragma once
#include <cstdint>

namespace kvzip {
class ThreadPool;
}

namespace kvzip::detail {

struct KeyRange {
  const float* k = nullptr;  // (n, D) post-RoPE keys
  uint32_t n = 0;            // rows (for the causal range: rows the LAST query token may see)
};

// The key axis of one KV head: ranges[0] ⊕ ... ⊕ ranges[n_ranges - 1]. The last range is causal:
// query token i (0-based among the call's T tokens) sees its first causal_base + i + 1 rows.
struct KeyAxis {
  KeyRange ranges[3];
  uint32_t n_ranges = 0;
  uint32_t causal_base = 0;
};

enum class Reduce : uint8_t { Max, Sum };

struct AttnStatsArgs {
  const float* q = nullptr;     // (T, Hq, D) post-RoPE queries
  uint32_t T = 0, Hq = 0, Hkv = 0, D = 0;
  float scale = 0.0f;           // logit scale, 1/sqrt(D)
  uint32_t t0 = 0, t1 = 0;      // query tokens [t0, t1) take part
  const KeyAxis* axes = nullptr;  // (Hkv)
  uint32_t col0 = 0, col1 = 0;  // columns of the key axis to reduce
  Reduce reduce = Reduce::Max;
  float* out = nullptr;         // (Hkv, out_stride): out[h * out_stride + c - col0] is combined
  uint64_t out_stride = 0;      // (max or +=) with the reduction over rows of column c
};

// Splits (KV head, query tile) over the pool (null: serial). OpenBLAS runs single-threaded inside
// the tasks and is restored to the pool's size afterwards.
void attention_stats(ThreadPool* pool, const AttnStatsArgs& a);

}  // namespace kvzip::detail
