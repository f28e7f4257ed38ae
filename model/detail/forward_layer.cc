// The steps of one forward chunk (see forward_layer.h). Every step calls a kernel front with the
// chunk's Exec; trace() names each intermediate tensor when a TraceFn is set and costs a branch
// otherwise.
#include "model/detail/forward_layer.h"

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <iterator>

#include "kernels/matmul.h"
#include "kernels/rms_norm.h"
#include "kernels/swiglu.h"
#include "kernels/thread_pool.h"

namespace kvzip::model::detail {
namespace {

void trace(const ChunkContext& c, const char* name, int layer, const float* data, uint32_t rows,
           uint32_t cols, uint32_t row0 = 0) {
  if (!c.trace || !*c.trace) return;
  (*c.trace)(TraceTensor{name, layer, data, rows, cols, c.positions[row0]});
}

const float* or_null(const std::vector<float>& b) { return b.empty() ? nullptr : b.data(); }

// One projection of a shared input: y(T, out) = x(T, in) · W^T + b.
struct Proj {
  const Matrix& w;    // (out, in) as stored
  const float* bias;  // (out) or nullptr
  float* y;           // (T, out)
};

// Runs projections that read the same x(T, in) as one matmul batch (for one token: one pool run
// for Q, K and V together).
void project(const ChunkContext& c, const float* x, std::initializer_list<Proj> ps) {
  kernels::MatmulArgs jobs[3];
  size_t n = 0;
  for (const Proj& p : ps) jobs[n++] = kernels::MatmulArgs{x, p.w.view(), p.bias, p.y, c.T};
  matmul(c.ex, std::span<const kernels::MatmulArgs>(jobs, n), c.path);
}

// x += y over n floats.
void add_in_place(const ChunkContext& c, float* x, const float* y, size_t n) {
  auto range = [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) x[i] += y[i];
  };
  if (c.ex.pool && n > 65536) {
    c.ex.pool->parallel_for(n, 16384, range);
  } else {
    range(0, n);
  }
}

// One item's attention call at `layer`: its cache's views as spans (written to `spans`, Hkv of
// them), its documents' parts where the cache is composed, and the layer's window.
static kernels::AttentionArgs item_attention(const ChunkContext& c, const ChunkItem& it,
                                             uint32_t layer, kernels::KvSpan* spans,
                                             kernels::LocalMaxProb* local) {
  const ModelConfig& cfg = c.w->config;
  ForwardScratch& s = *c.s;
  const uint32_t D = cfg.head_dim, Hq = cfg.n_heads, Hkv = cfg.n_kv_heads;
  const size_t qd = size_t(Hq) * D;
  bool own_window = false;  // the cache windows this layer by position (KvHeadView::from)
  for (uint32_t h = 0; h < Hkv; ++h) {
    KvHeadView view = it.cache->view(layer, h);
    spans[h] = kernels::KvSpan{view.k,     view.v,     view.len, view.k_tail, view.v_tail,
                               view.split, view.quant, view.kt,  view.kt_rows};
    spans[h].from = view.from;
    own_window = own_window || view.from;
  }
  kernels::AttentionArgs args{
      s.q.data() + it.row0 * qd, spans, s.att.data() + it.row0 * qd, it.T, Hq, Hkv, D,
      cfg.attention_scale()};
  const CacheParts parts = it.cache->parts(layer);  // a composed cache's documents
  args.parts = parts.spans;
  args.part_rot = parts.rot;
  args.n_parts = parts.n;
  args.local = local;
  args.window = cfg.is_local(layer) && !own_window ? cfg.sliding_window : 0;
  args.bf16 = c.attention_bf16;
  return args;
}

void attention_block(const ChunkContext& c, uint32_t layer) {
  const ModelConfig& cfg = c.w->config;
  const LayerWeights& lw = c.w->layers[layer];
  ForwardScratch& s = *c.s;
  const uint32_t E = cfg.d_model, D = cfg.head_dim, Hq = cfg.n_heads, Hkv = cfg.n_kv_heads;
  const int li = static_cast<int>(layer);

  rms_norm(c.ex,
           kernels::RmsNormArgs{s.x.data(), lw.attn_norm.data(), s.xn.data(), c.T, E, cfg.rms_eps});
  trace(c, "attn_norm", li, s.xn.data(), c.T, E);
  project(c, s.xn.data(),
          {{lw.wq, or_null(lw.bq), s.q.data()},
           {lw.wk, or_null(lw.bk), s.k.data()},
           {lw.wv, or_null(lw.bv), s.v.data()}});
  if (cfg.qk_norm) {  // each head's q and k as a row of D (Gemma 3, Qwen 3)
    rms_norm(c.ex, kernels::RmsNormArgs{s.q.data(), lw.q_norm.data(), s.q.data(), c.T * Hq, D,
                                        cfg.rms_eps});
    rms_norm(c.ex, kernels::RmsNormArgs{s.k.data(), lw.k_norm.data(), s.k.data(), c.T * Hkv, D,
                                        cfg.rms_eps});
  }
  const bool local_layer = cfg.is_local(layer);
  const kernels::RopeTable* rt = local_layer ? c.rope_local : c.rope;
  rope(c.ex, kernels::RopeArgs{s.q.data(), rt->cos.data(), rt->sin.data(), c.T, Hq, D});
  rope(c.ex, kernels::RopeArgs{s.k.data(), rt->cos.data(), rt->sin.data(), c.T, Hkv, D});
  trace(c, "q_rope", li, s.q.data(), c.T, Hq * D);
  trace(c, "k_rope", li, s.k.data(), c.T, Hkv * D);
  trace(c, "v", li, s.v.data(), c.T, Hkv * D);

  // Each cache appends its rows and attends over its own views; the rows of several caches
  // (Forward::step) share only the weight products around this.
  const ChunkItem one{c.cache, 0, c.T};
  const std::span<const ChunkItem> items =
      c.items.empty() ? std::span<const ChunkItem>(&one, 1) : c.items;
  const size_t kvd = size_t(Hkv) * D;
  for (const ChunkItem& it : items)
    it.cache->append(layer, s.k.data() + it.row0 * kvd, s.v.data() + it.row0 * kvd, it.T);
  const float scale = cfg.attention_scale();
  kernels::LocalMaxProb
      local;  // asked after the append: observers read the views with the new rows
  const bool stats = c.observer && c.observer->request_local_stats(layer, c.T, &local);
  const bool output_unused = c.last_output_unused && layer + 1 == cfg.n_layers;
  // Every item's call at once (attention_many: one pass of the pool for all of them).
  s.spans.resize(items.size() * Hkv);
  std::vector<kernels::AttentionArgs> calls;
  calls.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    kernels::AttentionArgs args =
        item_attention(c, items[i], layer, s.spans.data() + i * Hkv, stats ? &local : nullptr);
    if (output_unused) args.out = nullptr;  // statistics only, or no attention at all
    if (args.out || args.local) calls.push_back(args);
  }
  if (stats && calls.size() > 1) {  // the calls would max-combine into the same statistics rows
    for (const kernels::AttentionArgs& a : calls) attention(c.ex, a);
  } else {
    attention_many(c.ex, calls.data(), calls.size());
  }
  if (!output_unused) trace(c, "attn", li, s.att.data(), c.T, Hq * D);
  if (c.observer) {
    c.observer->on_attention(AttentionObservation{layer, s.q.data(), c.positions, c.T, Hq, Hkv, D,
                                                  scale, c.cache, s.x.data(), s.xn.data(), E});
  }
  if (output_unused) return;

  project(c, s.att.data(), {{lw.wo, nullptr, s.proj.data()}});
  if (cfg.post_norms)
    rms_norm(c.ex, kernels::RmsNormArgs{s.proj.data(), lw.post_attn_norm.data(), s.proj.data(), c.T,
                                        E, cfg.rms_eps});
  trace(c, "attn_proj", li, s.proj.data(), c.T, E);
  add_in_place(c, s.x.data(), s.proj.data(), size_t(c.T) * E);
  trace(c, "ffn_inp", li, s.x.data(), c.T, E);
}

void ffn_block(const ChunkContext& c, uint32_t layer) {
  const ModelConfig& cfg = c.w->config;
  const LayerWeights& lw = c.w->layers[layer];
  ForwardScratch& s = *c.s;
  const uint32_t E = cfg.d_model, F = cfg.d_ffn;
  const int li = static_cast<int>(layer);

  rms_norm(c.ex,
           kernels::RmsNormArgs{s.x.data(), lw.ffn_norm.data(), s.xn.data(), c.T, E, cfg.rms_eps});
  trace(c, "ffn_norm", li, s.xn.data(), c.T, E);
  project(c, s.xn.data(), {{lw.w_gate, nullptr, s.gate.data()}, {lw.w_up, nullptr, s.up.data()}});
  swiglu(c.ex, kernels::SwigluArgs{s.gate.data(), s.up.data(), s.gate.data(), size_t(c.T) * F,
                                   cfg.ffn_act == FfnActivation::GeluTanh});
  trace(c, "ffn_act", li, s.gate.data(), c.T, F);
  project(c, s.gate.data(), {{lw.w_down, nullptr, s.proj.data()}});
  if (cfg.post_norms)
    rms_norm(c.ex, kernels::RmsNormArgs{s.proj.data(), lw.post_ffn_norm.data(), s.proj.data(), c.T,
                                        E, cfg.rms_eps});
  trace(c, "ffn_out", li, s.proj.data(), c.T, E);
  add_in_place(c, s.x.data(), s.proj.data(), size_t(c.T) * E);
  trace(c, "layer_out", li, s.x.data(), c.T, E);
}

}  // namespace

void ForwardScratch::resize(const ModelConfig& c, uint32_t chunk) {
  const size_t E = c.d_model, F = c.d_ffn;
  const size_t qd = size_t(c.n_heads) * c.head_dim, kvd = size_t(c.n_kv_heads) * c.head_dim;
  x.resize(chunk * E);
  xn.resize(chunk * E);
  q.resize(chunk * qd);
  k.resize(chunk * kvd);
  v.resize(chunk * kvd);
  att.resize(chunk * qd);
  proj.resize(chunk * E);
  gate.resize(chunk * F);
  up.resize(chunk * F);
  spans.resize(c.n_kv_heads);
}

void embed(const ChunkContext& c, const int32_t* tokens) {
  const size_t E = c.w->config.d_model;
  const kernels::MatrixView emb = c.w->tok_embd.view();
  for (uint32_t t = 0; t < c.T; ++t)
    kernels::dequantize_view_rows(nullptr, emb, uint32_t(tokens[t]), 1, c.s->x.data() + t * E);
  if (const float k = c.w->config.embed_scale; k != 1.0f)  // Gemma: sqrt(E)
    for (size_t i = 0; i < size_t(c.T) * E; ++i) c.s->x[i] *= k;
  trace(c, "embd", -1, c.s->x.data(), c.T, static_cast<uint32_t>(E));
}

void layer_v(const ChunkContext& c, uint32_t layer) {
  const ModelConfig& cfg = c.w->config;
  const LayerWeights& lw = c.w->layers[layer];
  ForwardScratch& s = *c.s;
  rms_norm(c.ex, kernels::RmsNormArgs{s.x.data(), lw.attn_norm.data(), s.xn.data(), c.T,
                                      cfg.d_model, cfg.rms_eps});
  project(c, s.xn.data(), {{lw.wv, or_null(lw.bv), s.v.data()}});
}

void run_layer(const ChunkContext& c, uint32_t layer) {
  attention_block(c, layer);
  if (c.last_output_unused && layer + 1 == c.w->config.n_layers) return;
  ffn_block(c, layer);
}

void lm_head(const ChunkContext& c, uint32_t row0, uint32_t n, float* logits) {
  const ModelConfig& cfg = c.w->config;
  const uint32_t E = cfg.d_model;
  float* xn = c.s->xn.data();  // free after the last layer
  rms_norm(c.ex, kernels::RmsNormArgs{c.s->x.data() + size_t(row0) * E, c.w->output_norm.data(), xn,
                                      n, E, cfg.rms_eps});
  trace(c, "out_norm", -1, xn, n, E, row0);
  matmul(c.ex, kernels::MatmulArgs{xn, c.w->lm_head().view(), nullptr, logits, n}, c.path);
  trace(c, "logits", -1, logits, n, cfg.vocab_size, row0);
}

}  // namespace kvzip::model::detail
