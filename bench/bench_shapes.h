// Shared by the benchmarks: the default model's shapes (SmolLM2-135M-Instruct, read from its
// GGUF: L=30, E=576, Hq=9, Hkv=3, D=64, F=1536, V=49152) for synthetic runs whose speed does not
// depend on the weights' values.
#pragma once
#include "common/model_config.h"
#include "tests/support/model_shapes.h"  // header-only

namespace kvzip::bench {

inline ModelConfig smollm2_135m_config() {
  return test::config_of({"llama", 30, 576, 9, 3, 64, 1536, 49152, 8192, 100000.0f});
}

// Llama-3-8B's shapes with `layers` layers (untied LM head).
inline ModelConfig llama3_8b_config(uint32_t layers) {
  return test::config_of({"llama", layers, 4096, 32, 8, 128, 14336, 128256, 131072, 500000.0f,
                          1e-5f,
                          /*tied=*/false});
}

}  // namespace kvzip::bench
