// Helpers for the compress/ and prefill/ tests: random token ids, a query recorder built on the
// forward's trace, and a naive masked reference forward (whole sequence at once, every attention
// row materialised, double sums) in which a predicate decides which key rows each query may see.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "model/forward.h"
#include "model/weights.h"

namespace kvzip::test {

std::vector<int32_t> random_tokens(size_t n, uint32_t V, uint64_t seed);

// Post-RoPE queries recorded from a Forward's trace ("q_rope"), indexed by position:
// q[layer][(position - first) * Hq * D ...] for positions first, first + 1, ...
struct QueryRecorder {
  uint32_t first = 0;  // position of the first recorded row
  uint32_t Hq = 0, D = 0;
  std::vector<std::vector<float>> q;  // (L) × (rows, Hq, D)
  void clear(uint32_t first_position) {
    first = first_position;
    for (auto& v : q) v.clear();
  }
  TraceFn trace_fn();  // attach as ForwardOptions::trace; this recorder must outlive the Forward
  const float* at(uint32_t layer, uint32_t position, uint32_t head) const {
    return q[layer].data() + (size_t(position - first) * Hq + head) * D;
  }
};

// visible(layer, kv_head, query_position, key_position), asked only for key <= query.
using Visibility = std::function<bool(uint32_t, uint32_t, uint32_t, uint32_t)>;

// (T, V) logits of `tokens` at positions 0..T-1, each attention row restricted by `visible`.
std::vector<float> naive_masked_logits(const Weights& w, const std::vector<int32_t>& tokens,
                                       const Visibility& visible);

}  // namespace kvzip::test
