// Weights of a Llama-family model as the model file stores them: every matrix is a Matrix of
// ggml-typed rows (F32, F16, BF16, Q4_0 ... Q6_K), usually pointing into the mapped model file, so
// an 8B Q4 model needs about its file size in memory. Logically every matrix is row-major (out, in)
// so y = W·x is y[r] = dot(row r, x), with Q/K rows in the half-split RoPE order; a GGUF of a
// llama-type arch stores them interleaved, and Matrix::row_map says which stored row holds each
// canonical row (kernels read through it; nothing is copied). Norm weights and biases are small
// and kept as fp32 vectors. Dimension letters as in common/model_config.h. Biases are empty unless
// config.qkv_bias.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/model_config.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"

namespace kvzip::model {

// A (rows, cols) matrix in a ggml type. `data` holds rows · row_bytes() bytes in stored row order,
// either inside a mapped file (kept alive by Weights::storage) or inside `owned`.
struct Matrix {
  kernels::quant::GgmlType type = kernels::quant::GgmlType::F32;
  uint32_t rows = 0;  // out
  uint32_t cols = 0;  // in; a multiple of the type's block size
  const uint8_t* data = nullptr;
  std::vector<uint32_t> row_map;  // (rows): canonical row r is stored row row_map[r]; empty: same
  std::shared_ptr<const std::vector<uint8_t>> owned;  // the bytes, when not in a mapped file
  std::string name;                                   // for messages ("blk.3.attn_q.weight")

  bool empty() const { return rows == 0; }
  size_t row_bytes() const { return size_t(kernels::quant::row_bytes(type, cols)); }
  size_t bytes() const { return row_bytes() * rows; }
  // The view kernels take (kernels/matmul.h).
  kernels::MatrixView view() const {
    return kernels::MatrixView{type, data, row_bytes(),
                               rows, cols, row_map.empty() ? nullptr : row_map.data()};
  }

  // An fp32 matrix that owns its values (tests, tools): values holds rows · cols floats.
  static Matrix from_f32(const std::vector<float>& values, uint32_t rows, uint32_t cols,
                         std::string name = {});
};

// Canonical rows [row0, row0 + n) of m as fp32: out holds n · m.cols floats.
void dequantize_rows(const Matrix& m, uint32_t row0, uint32_t n, float* out);
// The whole matrix as fp32 (rows · cols floats, canonical order). For tests, tools and small
// models; the runtime never expands a whole model.
std::vector<float> to_f32(const Matrix& m);

struct LayerWeights {
  std::vector<float> attn_norm;       // (E)
  Matrix wq;                          // (Hq*D, E)
  Matrix wk;                          // (Hkv*D, E)
  Matrix wv;                          // (Hkv*D, E)
  std::vector<float> bq;              // (Hq*D) or empty, canonical order
  std::vector<float> bk;              // (Hkv*D) or empty, canonical order
  std::vector<float> bv;              // (Hkv*D) or empty
  Matrix wo;                          // (E, Hq*D)
  std::vector<float> ffn_norm;        // (E)
  std::vector<float> q_norm;          // (D) or empty: config.qk_norm
  std::vector<float> k_norm;          // (D) or empty
  std::vector<float> post_attn_norm;  // (E) or empty: config.post_norms
  std::vector<float> post_ffn_norm;   // (E) or empty
  Matrix w_gate;                      // (F, E)
  Matrix w_up;                        // (F, E)
  Matrix w_down;                      // (E, F)
};

struct Weights {
  ModelConfig config;
  Matrix tok_embd;                      // (V, E)
  std::vector<float> output_norm;       // (E)
  Matrix output;                        // (V, E); empty when config.tied_embeddings (use tok_embd)
  std::vector<LayerWeights> layers;     // L entries
  std::shared_ptr<const void> storage;  // keeps the mapped file the matrices point into alive

  const Matrix& lm_head() const { return output.empty() ? tok_embd : output; }
  // Bytes of all matrices as stored (what the forward pass streams per token).
  uint64_t matrix_bytes() const;
};

}  // namespace kvzip::model
