// Weights validation for the forward pass (see forward_check.h).
#include "model/detail/forward_check.h"

#include <string>
#include <vector>

#include "common/error.h"

namespace kvzip::model::detail {
namespace {

[[noreturn]] void bad(const std::string& what) {
  throw Error(
      Errc::invalid_argument,
      "model weights: " + what + "; the model file and its config disagree or the loader is wrong");
}

void expect_size(const std::vector<float>& t, size_t n, const std::string& name) {
  if (t.size() != n)
    bad(name + " has " + std::to_string(t.size()) + " values, expected " + std::to_string(n));
}

// A matrix must have the config's shape, a type the kernels compute with, whole blocks per row,
// data, and a row map (if any) that is a permutation of its rows.
void expect_matrix(const Matrix& m, size_t rows, size_t cols, const std::string& name) {
  if (m.rows != rows || m.cols != cols)
    bad(name + " is " + std::to_string(m.rows) + "x" + std::to_string(m.cols) + ", expected " +
        std::to_string(rows) + "x" + std::to_string(cols));
  if (rows == 0) return;
  const kernels::quant::TypeTraits* tr = kernels::quant::type_traits(uint32_t(m.type));
  if (!tr || !tr->dequantizable)
    throw Error(Errc::unsupported, "model weights: " + name + " has type " +
                                       kernels::quant::type_name(m.type) +
                                       ", which kvzip cannot compute with");
  if (cols % tr->block_elems != 0)
    bad(name + " has " + std::to_string(cols) + " columns, not a whole number of " + tr->name +
        " blocks");
  if (!m.data) bad(name + " has no data");
  if (!m.row_map.empty()) {
    if (m.row_map.size() != rows) bad(name + " has a row map of the wrong length");
    std::vector<bool> seen(rows);
    for (uint32_t r : m.row_map) {
      if (r >= rows || seen[r]) bad(name + " has a row map that is not a permutation");
      seen[r] = true;
    }
  }
}

void check_config(const ModelConfig& c) {
  auto positive = [](uint32_t v, const char* name) {
    if (v == 0) bad(std::string("config.") + name + " is 0, expected > 0");
  };
  positive(c.n_layers, "n_layers");
  positive(c.d_model, "d_model");
  positive(c.n_heads, "n_heads");
  positive(c.n_kv_heads, "n_kv_heads");
  positive(c.head_dim, "head_dim");
  positive(c.d_ffn, "d_ffn");
  positive(c.vocab_size, "vocab_size");
  if (c.n_heads % c.n_kv_heads != 0)
    bad("config.n_heads " + std::to_string(c.n_heads) + " is not a multiple of n_kv_heads " +
        std::to_string(c.n_kv_heads));
  if (!c.local_layers.empty() && c.local_layers.size() != c.n_layers)
    bad("config.local_layers has " + std::to_string(c.local_layers.size()) + " entries, expected " +
        std::to_string(c.n_layers) + " (one per layer) or none");
  if (c.hybrid() && c.sliding_window == 0) bad("config has local layers but sliding_window 0");
  if (c.head_dim % 2 != 0)
    bad("config.head_dim " + std::to_string(c.head_dim) + " is odd, RoPE needs it even");
  if (!(c.rms_eps > 0)) bad("config.rms_eps " + std::to_string(c.rms_eps) + " must be > 0");
}

}  // namespace

void validate_weights(const Weights& w) {
  const ModelConfig& c = w.config;
  check_config(c);
  const size_t E = c.d_model, F = c.d_ffn, V = c.vocab_size;
  const size_t qd = size_t(c.n_heads) * c.head_dim, kvd = size_t(c.n_kv_heads) * c.head_dim;
  expect_matrix(w.tok_embd, V, E, "tok_embd");
  expect_size(w.output_norm, E, "output_norm");
  if (c.tied_embeddings) {
    expect_matrix(w.output, 0, 0, "output (tied embeddings)");
  } else {
    expect_matrix(w.output, V, E, "output");
  }
  if (w.layers.size() != c.n_layers)
    bad("there are " + std::to_string(w.layers.size()) + " layers, expected " +
        std::to_string(c.n_layers));
  const size_t bias_q = c.qkv_bias ? qd : 0, bias_kv = c.qkv_bias ? kvd : 0;
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& lw = w.layers[l];
    const std::string p = "layers[" + std::to_string(l) + "].";
    expect_size(lw.attn_norm, E, p + "attn_norm");
    expect_matrix(lw.wq, qd, E, p + "wq");
    expect_matrix(lw.wk, kvd, E, p + "wk");
    expect_matrix(lw.wv, kvd, E, p + "wv");
    expect_size(lw.bq, bias_q, p + "bq");
    expect_size(lw.bk, bias_kv, p + "bk");
    expect_size(lw.bv, bias_kv, p + "bv");
    expect_matrix(lw.wo, E, qd, p + "wo");
    expect_size(lw.ffn_norm, E, p + "ffn_norm");
    expect_size(lw.q_norm, c.qk_norm ? c.head_dim : 0, p + "q_norm");
    expect_size(lw.k_norm, c.qk_norm ? c.head_dim : 0, p + "k_norm");
    expect_size(lw.post_attn_norm, c.post_norms ? E : 0, p + "post_attn_norm");
    expect_size(lw.post_ffn_norm, c.post_norms ? E : 0, p + "post_ffn_norm");
    expect_matrix(lw.w_gate, F, E, p + "w_gate");
    expect_matrix(lw.w_up, F, E, p + "w_up");
    expect_matrix(lw.w_down, E, F, p + "w_down");
  }
}

void check_cache_shape(const ModelConfig& cfg, CacheShape s) {
  if (!(s == cache_shape(cfg)))
    throw Error(Errc::invalid_argument,
                "cache shape L=" + std::to_string(s.n_layers) +
                    " Hkv=" + std::to_string(s.n_kv_heads) + " D=" + std::to_string(s.head_dim) +
                    " does not match the model (L=" + std::to_string(cfg.n_layers) + " Hkv=" +
                    std::to_string(cfg.n_kv_heads) + " D=" + std::to_string(cfg.head_dim) +
                    "); create the cache from this model's config");
}

void check_tokens(const ModelConfig& cfg, std::span<const int32_t> tokens) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || static_cast<uint32_t>(tokens[i]) >= cfg.vocab_size)
      throw Error(Errc::invalid_argument,
                  "token id " + std::to_string(tokens[i]) + " at index " + std::to_string(i) +
                      " is outside the vocabulary [0, " + std::to_string(cfg.vocab_size) + ")");
  }
}

}  // namespace kvzip::model::detail
