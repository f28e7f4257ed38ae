// Test support: R-KV's two terms written out plainly (spec/methods.md §4), the one reference the
// kernel, the decode-time policy and the offline scorer are checked against. Double precision,
// the similarity matrix S materialised, every logit formed; O(n²) memory, for small n only.
#pragma once
#include <cstdint>
#include <vector>

namespace kvzip::test {

std::vector<double> softmax(std::vector<double> x);

// Importance of n scored keys (n, D) from `tokens` probe tokens; token t, group head g reads
// q + t·q_stride + g·D. Max over the group on logits, softmax over the n keys, mean over the
// tokens, centred max-pool of `kernel` truncated at the ends.
std::vector<double> rkv_importance(const float* q, uint32_t tokens, uint64_t q_stride, uint32_t G,
                                   uint32_t D, double scale, const float* k, uint32_t n,
                                   uint32_t kernel);

// Redundancy over n candidate keys (n, D): cosine matrix with the diagonal zeroed, each row's most
// recent other entry above `threshold` zeroed, column means, softmax.
std::vector<double> rkv_redundancy(const float* k, uint32_t n, uint32_t D, double threshold);

}  // namespace kvzip::test
