// Weights validation for the forward pass (see forward_check.h).
#include "model/detail/forward_check.h"

#include <string>

#include "common/error.h"

namespace kvzip::detail {
namespace {

[[noreturn]] void bad(const std::string& what) {
  throw Error(Errc::invalid_argument,
              "model weights: " + what + "; the model file and its config disagree or the loader is wrong");
}

void expect_size(const std::vector<float>& t, size_t n, const std::string& name) {
  if (t.size() != n)
    bad(name + " has " + std::to_string(t.size()) + " values, expected " + std::to_string(n));
}

// An empty QuantMatrix is fine (the fp32 GEMV runs); a present one must be the fp32 matrix's shape.
void expect_quant(const QuantMatrix& q, size_t rows, size_t cols, const std::string& name) {
  if (q.empty()) return;
  if (q.rows != rows || q.cols != cols || cols % kQBlockElems != 0)
    bad(name + " (quantized) is " + std::to_string(q.rows) + "x" + std::to_string(q.cols) +
        ", expected " + std::to_string(rows) + "x" + std::to_string(cols) + " with 32 | cols");
  const size_t n = rows * qrow_bytes(q.format, q.cols);
  if (q.blocks.size() != n)
    bad(name + " (quantized, " + qformat_name(q.format) + ") has " + std::to_string(q.blocks.size()) +
        " bytes, expected " + std::to_string(n));
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
  if (c.head_dim % 2 != 0) bad("config.head_dim " + std::to_string(c.head_dim) + " is odd, RoPE needs it even");
  if (!(c.rms_eps > 0)) bad("config.rms_eps " + std::to_string(c.rms_eps) + " must be > 0");
}

}  // namespace

void validate_weights(const Weights& w) {
  const ModelConfig& c = w.config;
  check_config(c);
  const size_t E = c.d_model, F = c.d_ffn, V = c.vocab_size;
  const size_t qd = size_t(c.n_heads) * c.head_dim, kvd = size_t(c.n_kv_heads) * c.head_dim;
  expect_size(w.tok_embd, V * E, "tok_embd");
  expect_size(w.output_norm, E, "output_norm");
  if (c.tied_embeddings) {
    expect_size(w.output, 0, "output (tied embeddings)");
  } else {
    expect_size(w.output, V * E, "output");
  }
  if (w.layers.size() != c.n_layers)
    bad("there are " + std::to_string(w.layers.size()) + " layers, expected " + std::to_string(c.n_layers));
  const size_t bias_q = c.qkv_bias ? qd : 0, bias_kv = c.qkv_bias ? kvd : 0;
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& lw = w.layers[l];
    const std::string p = "layers[" + std::to_string(l) + "].";
    expect_size(lw.attn_norm, E, p + "attn_norm");
    expect_size(lw.wq, qd * E, p + "wq");
    expect_size(lw.wk, kvd * E, p + "wk");
    expect_size(lw.wv, kvd * E, p + "wv");
    expect_size(lw.bq, bias_q, p + "bq");
    expect_size(lw.bk, bias_kv, p + "bk");
    expect_size(lw.bv, bias_kv, p + "bv");
    expect_size(lw.wo, E * qd, p + "wo");
    expect_size(lw.ffn_norm, E, p + "ffn_norm");
    expect_size(lw.w_gate, F * E, p + "w_gate");
    expect_size(lw.w_up, F * E, p + "w_up");
    expect_size(lw.w_down, E * F, p + "w_down");
    const LayerQuantWeights& q = lw.quant;
    expect_quant(q.wq, qd, E, p + "wq");
    expect_quant(q.wk, kvd, E, p + "wk");
    expect_quant(q.wv, kvd, E, p + "wv");
    expect_quant(q.wo, E, qd, p + "wo");
    expect_quant(q.w_gate, F, E, p + "w_gate");
    expect_quant(q.w_up, F, E, p + "w_up");
    expect_quant(q.w_down, E, F, p + "w_down");
  }
  expect_quant(w.quant_tok_embd, V, E, "tok_embd");
  expect_quant(w.quant_output, c.tied_embeddings ? 0 : V, E, "output");
}

bool has_quant(const Weights& w) {
  if (!w.quant_tok_embd.empty() || !w.quant_output.empty()) return true;
  for (const LayerWeights& lw : w.layers) {
    const LayerQuantWeights& q = lw.quant;
    for (const QuantMatrix* m : {&q.wq, &q.wk, &q.wv, &q.wo, &q.w_gate, &q.w_up, &q.w_down})
      if (!m->empty()) return true;
  }
  return false;
}

}  // namespace kvzip::detail
