// Helpers the composition tests share: rows of cache heads gathered into a ragged cache (the
// block-diagonal and joint references are assembled from them), greedy generation parameters,
// token-id conversion and the largest absolute difference of two logit vectors.
#pragma once
#include <cstdint>
#include <vector>

#include "cache/kv_cache.h"
#include "cache/ragged_cache.h"
#include "model/model.h"

namespace kvzip::test {

// Rows [from, len) of one cache head into a ragged head being assembled.
struct HeadRows {
  std::vector<float> k, v;
  std::vector<uint32_t> pos;
  void add(const model::KvHeadView& view, uint32_t from, uint32_t D);
};

// A ragged cache of logical length `length` holding heads[l * Hkv + h]'s rows in head (l, h).
model::RaggedKvCache assemble(const std::vector<HeadRows>& heads, model::CacheShape shape,
                              uint32_t length);

model::GenerateParams greedy(uint32_t n);
std::vector<int32_t> ids(const std::vector<uint32_t>& t);
// Catch2 REQUIREs equal sizes.
double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace kvzip::test
