// The shape checks both model-config readers (GGUF, Hugging Face config.json) run once the numbers
// are read: every dimension non-zero, whole GQA groups, an even head dimension (RoPE rotates
// pairs). The messages use the file's own names for the fields, so they say what to fix there.
#pragma once
#include <functional>
#include <string>

#include "common/model_config.h"

namespace kvzip::model::detail {

struct ConfigNames {
  // In "model dimensions must be non-zero (L=.. E=.. ...)": L, E, Hq, Hkv, D, F, V.
  const char* dims[7];
  const char* n_heads;  // "<n_heads> 12 is not a multiple of <n_kv_heads> 5"
  const char* n_kv_heads;
  const char* head_dim;  // "<head_dim> 63 is odd"
};

// Calls `bad` (which throws) with the first failed check's message.
void check_config_shape(const ModelConfig& c, const ConfigNames& names,
                        const std::function<void(const std::string&)>& bad);

}  // namespace kvzip::model::detail
