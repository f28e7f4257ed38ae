// One CHECK per ModelConfig field, so a mismatch names the field: for tests that read the same
// model two ways (GGUF and a Hugging Face folder) or check a reader against the config it was
// written from.
#pragma once
#include "common/model_config.h"

namespace kvzip::test {

// same_context = false leaves max_context out (a GGUF conversion may cap it).
void check_same_config(const ModelConfig& a, const ModelConfig& b, bool same_context = true);

}  // namespace kvzip::test
