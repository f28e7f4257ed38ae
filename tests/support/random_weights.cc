// Deterministic random tensors and tiny random models for the tests (see random_weights.h).
#include "tests/support/random_weights.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace kvzip::test {

std::vector<float> random_vector(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 1);
  std::vector<float> v(n);
  for (auto& x : v) {
    double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;  // [0, 1)
    x = static_cast<float>(lo + (hi - lo) * u);
  }
  return v;
}

ModelConfig tiny_llama_config() {
  ModelConfig c;
  c.arch = "llama";
  c.n_layers = 2;
  c.d_model = 64;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 16;
  c.d_ffn = 96;
  c.vocab_size = 97;
  c.max_context = 2048;
  c.rope_base = 10000.0f;
  c.rms_eps = 1e-5f;
  c.tied_embeddings = true;
  c.qkv_bias = false;
  return c;
}

ModelConfig tiny_qwen2_config() {
  ModelConfig c = tiny_llama_config();
  c.arch = "qwen2";
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.head_dim = 16;
  c.d_model = 96;
  c.rope_base = 1000000.0f;
  c.rms_eps = 1e-6f;
  c.tied_embeddings = false;
  c.qkv_bias = true;
  return c;
}

Weights random_weights(const ModelConfig& cfg, uint64_t seed) {
  const size_t E = cfg.d_model, F = cfg.d_ffn, V = cfg.vocab_size;
  const size_t qd = size_t(cfg.n_heads) * cfg.head_dim, kvd = size_t(cfg.n_kv_heads) * cfg.head_dim;
  uint64_t s = seed * 1000;
  auto mat = [&](size_t out, size_t in) {
    float a = 1.0f / std::sqrt(static_cast<float>(in));
    return Matrix::from_f32(random_vector(out * in, ++s, -a, a), uint32_t(out), uint32_t(in));
  };
  auto norm = [&](size_t n) { return random_vector(n, ++s, 0.8f, 1.2f); };
  auto bias = [&](size_t n) { return cfg.qkv_bias ? random_vector(n, ++s, -0.1f, 0.1f) : std::vector<float>{}; };
  Weights w;
  w.config = cfg;
  w.tok_embd = Matrix::from_f32(random_vector(V * E, ++s), uint32_t(V), uint32_t(E));
  w.output_norm = norm(E);
  if (!cfg.tied_embeddings) w.output = mat(V, E);
  for (uint32_t l = 0; l < cfg.n_layers; ++l) {
    LayerWeights lw;
    lw.attn_norm = norm(E);
    lw.wq = mat(qd, E);
    lw.wk = mat(kvd, E);
    lw.wv = mat(kvd, E);
    lw.bq = bias(qd);
    lw.bk = bias(kvd);
    lw.bv = bias(kvd);
    lw.wo = mat(E, qd);
    lw.ffn_norm = norm(E);
    lw.w_gate = mat(F, E);
    lw.w_up = mat(F, E);
    lw.w_down = mat(E, F);
    w.layers.push_back(std::move(lw));
  }
  return w;
}

double rel_error(const float* got, const float* want, size_t n) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(got[i])) return 1e30;
    diff = std::max(diff, std::fabs(double(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(double(want[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

}  // namespace kvzip::test
