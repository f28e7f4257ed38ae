// Synthetic models for the tests and the benchmarks (header-only, so bench/ can include it): a
// ModelConfig from a decoder's shape in the glossary's letters, and Weights of a config's shapes
// filled by the caller's generators. The generators are called in one fixed order (embedding,
// output norm, untied LM head, then per layer: attn_norm, wq, wk, wv, biases, wo, ffn_norm,
// gate, up, down), so a seeded generator gives the same weights on every run.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/weights.h"

namespace kvzip::test {

struct ModelShape {
  std::string arch;
  uint32_t L, E, Hq, Hkv, D, F, V, max_context;
  float rope_base;
  float rms_eps = 1e-5f;
  bool tied_embeddings = true;
  bool qkv_bias = false;
};

inline ModelConfig config_of(const ModelShape& s) {
  ModelConfig c;
  c.arch = s.arch;
  c.n_layers = s.L, c.d_model = s.E, c.n_heads = s.Hq, c.n_kv_heads = s.Hkv, c.head_dim = s.D;
  c.d_ffn = s.F, c.vocab_size = s.V, c.max_context = s.max_context;
  c.rope_base = s.rope_base, c.rms_eps = s.rms_eps;
  c.tied_embeddings = s.tied_embeddings, c.qkv_bias = s.qkv_bias;
  return c;
}

// mat(out, in) -> Matrix for the projections and the untied LM head; embedding(V, E) -> Matrix;
// norm(n) and bias(n) -> std::vector<float> (bias only when cfg.qkv_bias).
template <class Mat, class Embedding, class Norm, class Bias>
model::Weights shaped_weights(const ModelConfig& cfg, Mat mat, Embedding embedding, Norm norm,
                              Bias bias) {
  const size_t E = cfg.d_model, F = cfg.d_ffn, V = cfg.vocab_size;
  const size_t qd = size_t(cfg.n_heads) * cfg.head_dim, kvd = size_t(cfg.n_kv_heads) * cfg.head_dim;
  model::Weights w;
  w.config = cfg;
  w.tok_embd = embedding(V, E);
  w.output_norm = norm(E);
  if (!cfg.tied_embeddings) w.output = mat(V, E);
  for (uint32_t l = 0; l < cfg.n_layers; ++l) {
    model::LayerWeights lw;
    lw.attn_norm = norm(E);
    lw.wq = mat(qd, E);
    lw.wk = mat(kvd, E);
    lw.wv = mat(kvd, E);
    if (cfg.qkv_bias) {
      lw.bq = bias(qd);
      lw.bk = bias(kvd);
      lw.bv = bias(kvd);
    }
    lw.wo = mat(E, qd);
    lw.ffn_norm = norm(E);
    lw.w_gate = mat(F, E);
    lw.w_up = mat(F, E);
    lw.w_down = mat(E, F);
    w.layers.push_back(std::move(lw));
  }
  return w;
}

}  // namespace kvzip::test
