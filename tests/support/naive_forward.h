// Test support: a naive reference forward of the Llama-family model (whole sequence at once, every
// attention row materialised, double sums) that the forward pass and the ragged/masked attention
// tests compare against; a predicate can hide key rows from queries. Also random token ids.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "checkpoint/weights.h"

namespace kvzip::test {

// n token ids in [0, V), from random_vector(n, seed, 0, 1).
std::vector<int32_t> random_tokens(size_t n, uint32_t V, uint64_t seed);

// visible(layer, kv_head, query_position, key_position), asked only for key <= query.
using Visibility = std::function<bool(uint32_t, uint32_t, uint32_t, uint32_t)>;

struct NaiveForward {
  std::vector<float> logits;  // (T, V)
  std::vector<std::vector<float>> q, k,
      v;  // per layer: post-RoPE (T, Hq, D), (T, Hkv, D); (T, Hkv, D)
};

// `tokens` at positions 0..T-1; each attention row restricted by `visible` (empty: plain causal).
NaiveForward naive_forward(const model::Weights& w, const std::vector<int32_t>& tokens,
                           const Visibility& visible = {});

}  // namespace kvzip::test
