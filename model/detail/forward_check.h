// Validation of Weights against their ModelConfig before a Forward uses them: every tensor has
// exactly the shape the config implies, in a type the kernels compute with, biases exist iff
// qkv_bias, the GQA group is whole, and row maps are permutations. Also the per-call checks every
// forward pass (CPU and GPU) runs on its inputs.
#pragma once
#include <cstdint>
#include <span>

#include "cache/kv_cache.h"
#include "checkpoint/weights.h"

namespace kvzip::model::detail {

// Throws Errc::invalid_argument naming the first bad field or tensor, its size and the expected
// one.
void validate_weights(const Weights& w);

// A forward call's inputs (CPU and GPU, single and batched calls). Errc::invalid_argument:
// the cache's shape is not the model's (both named); a token id outside [0, V) (id and index).
void check_cache_shape(const ModelConfig& cfg, CacheShape cache);
void check_tokens(const ModelConfig& cfg, std::span<const int32_t> tokens);

}  // namespace kvzip::model::detail
