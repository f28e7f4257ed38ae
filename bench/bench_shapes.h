// Shared by the CPU benchmarks: the default model's shapes (SmolLM2-135M-Instruct, read from its
// GGUF: L=30, E=576, Hq=9, Hkv=3, D=64, F=1536, V=49152) for synthetic runs whose speed does not
// depend on the weights' values.
#pragma once
#include "common/model_config.h"

namespace kvzip::bench {

inline ModelConfig smollm2_135m_config() {
  ModelConfig c;
  c.arch = "llama";
  c.n_layers = 30;
  c.d_model = 576;
  c.n_heads = 9;
  c.n_kv_heads = 3;
  c.head_dim = 64;
  c.d_ffn = 1536;
  c.vocab_size = 49152;
  c.max_context = 8192;
  c.rope_base = 100000.0f;
  c.rms_eps = 1e-5f;
  c.tied_embeddings = true;
  return c;
}

}  // namespace kvzip::bench
