// One chunk of the forward pass, step by step: embedding, the transformer layers (pre-norm
// attention with RoPE and GQA, pre-norm SwiGLU FFN, residuals; Gemma 3 / Qwen 3 add QK-norm,
// post-norms, GeGLU and sliding-window local layers per ModelConfig), the final norm and LM head.
// Internal to model/forward.cc; ChunkContext carries what every step reads.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/attention.h"
#include "kernels/device.h"
#include "kernels/matmul.h"
#include "kernels/rope.h"
#include "model/forward.h"

namespace kvzip::model::detail {

// Activations of one chunk of up to `chunk` tokens, allocated once per Forward.
struct ForwardScratch {
  std::vector<float> x;                // (T, E) residual stream
  std::vector<float> xn;               // (T, E) normalised input of a block
  std::vector<float> q;                // (T, Hq, D)
  std::vector<float> k;                // (T, Hkv, D)
  std::vector<float> v;                // (T, Hkv, D)
  std::vector<float> att;              // (T, Hq, D) attention output
  std::vector<float> proj;             // (T, E) output of wo or w_down
  std::vector<float> gate;             // (T, F)
  std::vector<float> up;               // (T, F)
  std::vector<kernels::KvSpan> spans;  // (items of a step, Hkv)
  void resize(const ModelConfig& c, uint32_t chunk);
};

// One cache's rows of a chunk: rows [row0, row0 + T) of every activation belong to `cache`.
struct ChunkItem {
  AttentionCache* cache = nullptr;
  uint32_t row0 = 0;
  uint32_t T = 0;
};

struct ChunkContext {
  const Weights* w = nullptr;
  kernels::Exec ex;
  const TraceFn* trace = nullptr;            // null or empty: no tracing
  AttentionCache* cache = nullptr;           // the cache of a one-cache chunk (items empty)
  std::span<const ChunkItem> items;          // several caches (Forward::step); empty: {cache, 0, T}
  AttentionObserver* observer = nullptr;     // one-cache chunks only
  const kernels::RopeTable* rope = nullptr;  // (T, D/2) for this chunk's positions
  const kernels::RopeTable* rope_local = nullptr;  // the same for local (sliding-window) layers
  const uint32_t* positions = nullptr;             // (T)
  uint32_t T = 0;                                  // rows in all
  ForwardScratch* s = nullptr;
  kernels::MatmulPath path =
      kernels::MatmulPath::Fast;  // kernels for the weight products (kernels/matmul.h)
  // Nothing reads the last layer's output (no logits from this chunk, no trace): that layer stops
  // after its K/V append and whatever attention statistics an observer asked for.
  bool last_output_unused = false;
  bool attention_bf16 = false;  // AttentionArgs::bf16 (Forward::set_prompt_bf16, Fast path only)
};

// x(T, E) = tok_embd rows of the tokens (ids already validated).
void embed(const ChunkContext& c, const int32_t* tokens);
// c.s->v (T, Hkv·D) = layer `layer`'s values of the residual stream c.s->x: its attention norm and
// V projection only (values carry no RoPE); nothing is appended, x is left as it is.
void layer_v(const ChunkContext& c, uint32_t layer);
// Runs layer `layer` on c.s->x in place and appends the chunk's K/V to the cache.
void run_layer(const ChunkContext& c, uint32_t layer);
// logits(n, V) for rows [row0, row0 + n) of the residual stream (final norm + LM head).
void lm_head(const ChunkContext& c, uint32_t row0, uint32_t n, float* logits);

}  // namespace kvzip::model::detail
