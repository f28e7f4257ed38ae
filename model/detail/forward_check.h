// Validation of Weights against their ModelConfig before a Forward uses them: every tensor has
// exactly the size the config implies, biases exist iff qkv_bias, the GQA group is whole, and
// quantized copies (QuantMatrix), where present, have their fp32 twin's shape.
#pragma once
#include "model/weights.h"

namespace kvzip::detail {

// Throws Errc::invalid_argument naming the first bad field or tensor, its size and the expected one.
void validate_weights(const Weights& w);

// Whether any matrix has a quantized block copy (QuantMatrix) for the decode GEMV.
bool has_quant(const Weights& w);

}  // namespace kvzip::detail
