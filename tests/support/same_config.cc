// check_same_config (see same_config.h).
#include "tests/support/same_config.h"

#include <catch2/catch.hpp>

namespace kvzip::test {

void check_same_config(const ModelConfig& a, const ModelConfig& b, bool same_context) {
  CHECK(a.arch == b.arch);
  CHECK(a.n_layers == b.n_layers);
  CHECK(a.d_model == b.d_model);
  CHECK(a.n_heads == b.n_heads);
  CHECK(a.n_kv_heads == b.n_kv_heads);
  CHECK(a.head_dim == b.head_dim);
  CHECK(a.d_ffn == b.d_ffn);
  CHECK(a.vocab_size == b.vocab_size);
  if (same_context) CHECK(a.max_context == b.max_context);
  CHECK(a.rope_base == b.rope_base);
  CHECK(a.rope_scaling.kind == b.rope_scaling.kind);
  CHECK(a.rope_scaling.factor == b.rope_scaling.factor);
  CHECK(a.rope_scaling.low_freq_factor == b.rope_scaling.low_freq_factor);
  CHECK(a.rope_scaling.high_freq_factor == b.rope_scaling.high_freq_factor);
  CHECK(a.rope_scaling.original_context == b.rope_scaling.original_context);
  CHECK(a.rms_eps == b.rms_eps);
  CHECK(a.tied_embeddings == b.tied_embeddings);
  CHECK(a.qkv_bias == b.qkv_bias);
  CHECK(a.qk_norm == b.qk_norm);
  CHECK(a.post_norms == b.post_norms);
  CHECK(a.ffn_act == b.ffn_act);
  CHECK(a.embed_scale == b.embed_scale);
  CHECK(a.attention_scale() == b.attention_scale());
  CHECK(a.sliding_window == b.sliding_window);
  CHECK(a.local_layers == b.local_layers);
  if (a.hybrid()) CHECK(a.rope_local_base == b.rope_local_base);
}

}  // namespace kvzip::test
