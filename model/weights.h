// Weights of a Llama-family model in fp32, dequantized once at load, in the canonical layout the
// runtime uses: every matrix is row-major (out, in) so y = W·x is y[r] = dot(row r, x), and the
// Q/K rows are in half-split RoPE order (the GGUF loader undoes llama.cpp's interleave permutation).
// Dimension letters as in common/dims.h. Biases are empty unless config.qkv_bias.
// Next to the fp32 matrices, a loader may keep the file's own blocks (QuantMatrix) for the decode
// GEMV; each holds exactly the values its fp32 twin was dequantized to, in the same row order.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/model_config.h"
#include "kernels/qgemv.h"

namespace kvzip {

// A (rows, cols) matrix in a block format of kernels/qgemv.h, or empty (no blocks: the decode
// GEMV uses the fp32 copy). cols is a multiple of 32; blocks holds rows · qrow_bytes(format, cols).
struct QuantMatrix {
  QFormat format = QFormat::Q8_0;
  uint32_t rows = 0;
  uint32_t cols = 0;
  std::vector<uint8_t> blocks;
  bool empty() const { return blocks.empty(); }
};

// Block copies of one layer's matrices (each empty when the file's type has no qgemv format).
struct LayerQuantWeights {
  QuantMatrix wq, wk, wv, wo, w_gate, w_up, w_down;
};

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
  LayerQuantWeights quant;       // same shapes as above, or empty
};

struct Weights {
  ModelConfig config;
  std::vector<float> tok_embd;     // (V, E)
  std::vector<float> output_norm;  // (E)
  std::vector<float> output;       // (V, E); empty when config.tied_embeddings (use tok_embd)
  std::vector<LayerWeights> layers;  // L entries
  QuantMatrix quant_tok_embd;      // (V, E) or empty
  QuantMatrix quant_output;        // (V, E) or empty

  const std::vector<float>& lm_head() const { return output.empty() ? tok_embd : output; }
  const QuantMatrix& quant_lm_head() const { return output.empty() ? quant_tok_embd : quant_output; }
};

}  // namespace kvzip
