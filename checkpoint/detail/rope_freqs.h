// llama.cpp stores a Llama 3.1-style model's RoPE scaling not as metadata but as the tensor
// rope_freqs.weight: for every rotary pair i < D/2, the divisor of its frequency base^(-2i/D).
// kvzip (and the .kvz header) carry the llama3 parameters instead, so they are recovered from the
// divisors. Only the ratios old_context/(high-low) and low/(high-low) shape the divisors, so the
// result is normalised to low_freq_factor = 1 (the value every released Llama 3.x uses); it is
// accepted only if kvzip's own llama3 rule reproduces every divisor.
#pragma once
#include <cstdint>
#include <optional>
#include <span>

#include "common/model_config.h"

namespace kvzip::model::detail {

// The scaling whose frequencies equal base^(-2i/D) / divisors[i] for every i (relative 1e-5):
// kind None when every divisor is 1, Linear when all are one factor > 1, else Llama3. nullopt
// when no such scaling exists, or when fewer than two pairs lie in the interpolated band, so that
// the band edges are not pinned down.
std::optional<RopeScaling> scaling_from_rope_freqs(std::span<const float> divisors, float base,
                                                   uint32_t head_dim);

}  // namespace kvzip::model::detail
