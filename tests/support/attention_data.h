// Random inputs for the attention kernel tests: queries (T, Hq, D) in [-2, 2] and, per KV head,
// len rows of keys (in [-2, 2]) and values (in [-1, 1]) as one-segment spans. The same seed gives
// the same data; keys and values are seeded per head, so two sets with the same seed and len share
// them whatever T. Move-only: the spans point into the vectors.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/attention.h"

namespace kvzip::test {

struct AttentionData {
  std::vector<float> q;
  std::vector<std::vector<float>> k, v;
  std::vector<kernels::KvSpan> spans;

  AttentionData() = default;
  AttentionData(AttentionData&&) = default;
  AttentionData& operator=(AttentionData&&) = default;
  AttentionData(const AttentionData&) = delete;
  AttentionData& operator=(const AttentionData&) = delete;
};

AttentionData random_attention_data(uint32_t T, uint32_t Hq, uint32_t Hkv, uint32_t D, uint32_t len,
                                    uint64_t seed);

}  // namespace kvzip::test
