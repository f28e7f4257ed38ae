// Validation of Weights against their ModelConfig before a Forward uses them: every tensor has
// exactly the shape the config implies, in a type the kernels compute with, biases exist iff
// qkv_bias, the GQA group is whole, and row maps are permutations.
#pragma once
#include "model/weights.h"

namespace kvzip::detail {

// Throws Errc::invalid_argument naming the first bad field or tensor, its size and the expected one.
void validate_weights(const Weights& w);

}  // namespace kvzip::detail
