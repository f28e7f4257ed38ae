// Weights of a Llama-family model in fp32, dequantized once at load, in the canonical layout the
// runtime uses: every matrix is row-major (out, in) so y = W·x is y[r] = dot(row r, x), and the
// Q/K rows are in half-split RoPE order (the GGUF loader undoes llama.cpp's interleave permutation).
// Dimension letters as in common/dims.h. Biases are empty unless config.qkv_bias.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/model_config.h"

namespace kvzip {

struct LayerWeights {
  std::vector<float> attn_norm;  // (E)
  std::vector<float> wq;         // (Hq*D, E)
  std::vector<float> wk;         // (Hkv*D, E)
  std::vector<float> wv;         // (Hkv*D, E)
  std::vector<float> bq;         // (Hq*D) or empty
  std::vector<float> bk;         // (Hkv*D) or empty
  std::vector<float> bv;         // (Hkv*D) or empty
  std::vector<float> wo;         // (E, Hq*D)
  std::vector<float> ffn_norm;   // (E)
  std::vector<float> w_gate;     // (F, E)
  std::vector<float> w_up;       // (F, E)
  std::vector<float> w_down;     // (E, F)
};

struct Weights {
  ModelConfig config;
  std::vector<float> tok_embd;     // (V, E)
  std::vector<float> output_norm;  // (E)
  std::vector<float> output;       // (V, E); empty when config.tied_embeddings (use tok_embd)
  std::vector<LayerWeights> layers;  // L entries

  const std::vector<float>& lm_head() const { return output.empty() ? tok_embd : output; }
};

}  // namespace kvzip
