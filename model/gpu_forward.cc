// GpuForward (see gpu_forward.h): weight upload, scratch, and the per-chunk pass — embed, per
// layer [RMSNorm→bf16, Q/K/V GEMMs, RoPE, cache append, attention, observer, O GEMM, residual,
// RMSNorm→bf16, gate/up GEMMs, SwiGLU→bf16, down GEMM, residual], then the LM head in slices.
// The step order and the tensors match model/detail/forward_layer.cc one to one.
#include "model/gpu_forward.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "common/error.h"
#include "kernels/attention.h"
#include "kernels/device.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/gpu.h"
#include "kernels/rms_norm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "model/detail/chunk_loop.h"
#include "model/detail/forward_check.h"
#include "model/detail/generate_loop.h"

namespace kvzip::model {

#if KVZIP_HAVE_CUDA
namespace {

using kernels::gpu::GpuBuffer;

constexpr uint32_t kLogitRows = 16;  // LM-head rows per GEMM slice (bounds the logits scratch)

// A stored matrix, dequantized one slab of canonical rows at a time (the host never holds the
// whole matrix in fp32), rounded to bf16 and copied into one device buffer.
GpuBuffer<uint16_t> upload_bf16(const Matrix& m) {
  GpuBuffer<uint16_t> b(size_t(m.rows) * m.cols);
  if (m.empty()) return b;
  const uint32_t slab =
      uint32_t(std::max<size_t>(1, std::min<size_t>(m.rows, (size_t(1) << 22) / m.cols)));
  std::vector<float> rows(size_t(slab) * m.cols);
  for (uint32_t r0 = 0; r0 < m.rows; r0 += slab) {
    const uint32_t n = std::min(slab, m.rows - r0);
    dequantize_rows(m, r0, n, rows.data());
    const std::vector<uint16_t> h = kernels::gpu::to_bf16(rows.data(), size_t(n) * m.cols);
    kernels::gpu::copy_to_device(b.data() + size_t(r0) * m.cols, h.data(),
                                 h.size() * sizeof(uint16_t));
  }
  return b;
}

GpuBuffer<float> upload_f32(const std::vector<float>& w) {
  GpuBuffer<float> b(w.size());
  b.upload(w);
  return b;
}

GpuBuffer<uint16_t> random_bf16(size_t n, uint64_t seed, float bound, void* s) {
  GpuBuffer<uint16_t> b(n);
  kernels::cuda::fill_uniform_bf16(b.data(), n, seed, -bound, bound, s);
  return b;
}

GpuBuffer<float> random_f32(size_t n, uint64_t seed, float lo, float hi, void* s) {
  GpuBuffer<float> b(n);
  kernels::cuda::fill_uniform(b.data(), n, seed, lo, hi, s);
  return b;
}

struct GpuLayer {
  GpuBuffer<float> attn_norm, ffn_norm;                      // (E)
  GpuBuffer<float> bq, bk, bv;                               // (Hq*D), (Hkv*D), (Hkv*D) or empty
  GpuBuffer<uint16_t> wq, wk, wv, wo, w_gate, w_up, w_down;  // bf16, (out, in)
};

void check_config(const ModelConfig& c) {
  if (c.n_kv_heads == 0 || c.n_heads % c.n_kv_heads != 0)
    throw Error(Errc::invalid_argument, "GpuForward: Hq is not a multiple of Hkv");
  if (c.n_kv_heads > kernels::kMaxKvHeads)
    throw Error(Errc::unsupported, "GpuForward: " + std::to_string(c.n_kv_heads) +
                                       " KV heads; the CUDA kernels take at most " +
                                       std::to_string(kernels::kMaxKvHeads) +
                                       " (run it on the CPU)");
  if (c.qk_norm || c.post_norms || c.hybrid() || c.ffn_act != FfnActivation::Silu ||
      c.embed_scale != 1.0f || c.query_scale != 0.0f)
    throw Error(Errc::unsupported,
                "GpuForward: architecture '" + c.arch +
                    "' (QK-norm, post-norms, GeGLU or "
                    "sliding-window layers) has no CUDA forward yet; run it on the CPU");
  if (c.head_dim != 64 && c.head_dim != 128)
    throw Error(Errc::unsupported, "GpuForward: head_dim " + std::to_string(c.head_dim) +
                                       " has no CUDA attention kernel (64 and 128 are compiled); "
                                       "run it on the CPU");
  if (kernels::cuda_device_count() == 0)
    throw Error(Errc::unsupported, "GpuForward: no CUDA device is visible; run it on the CPU");
}

}  // namespace

struct GpuForward::Impl {
  ModelConfig cfg;
  GpuForwardOptions opt;
  void* stream = nullptr;
  std::vector<GpuLayer> layers;
  GpuBuffer<uint16_t> tok_embd, output;  // (V, E) bf16; output empty when tied
  GpuBuffer<float> output_norm;          // (E)
  uint64_t weight_bytes = 0;
  std::vector<float> inv_freq;
  // Scratch for one chunk of `chunk` tokens.
  GpuBuffer<float> x, proj, q, k, v, att, gate, up, logits, cos, sin;
  GpuBuffer<uint16_t> xn16, att16, act16;
  GpuBuffer<int32_t> tokens;
  kernels::RopeTable rope;
  std::vector<uint32_t> positions;
  std::vector<kernels::KvSpan> spans;

  explicit Impl(const ModelConfig& c, GpuForwardOptions o) : cfg(c), opt(o) {
    check_config(c);
    if (o.chunk == 0)
      throw Error(Errc::invalid_argument, "GpuForwardOptions.chunk is 0, expected >= 1");
    stream = kernels::gpu::create_stream();
    inv_freq = kernels::rope_inv_freq(c.head_dim, c.rope_base, c.rope_scaling);
  }
  ~Impl() { kernels::gpu::destroy_stream(stream); }

  const uint16_t* lm_head() const { return output.size() ? output.data() : tok_embd.data(); }
  void alloc_scratch();
  void count_weights();
  kernels::Exec ex() const { return kernels::Exec{kernels::Device::Cuda, nullptr, stream}; }
  void run_chunk(GpuCache& cache, const int32_t* host_tokens, uint32_t T,
                 GpuAttentionObserver* observer);
  void attention_block(GpuCache& cache, uint32_t layer, uint32_t T, GpuAttentionObserver* obs);
  void ffn_block(uint32_t layer, uint32_t T);
  void lm_head_rows(uint32_t row0, uint32_t n, float* host_logits);
};

void GpuForward::Impl::alloc_scratch() {
  const size_t C = opt.chunk, E = cfg.d_model, F = cfg.d_ffn;
  const size_t qd = size_t(cfg.n_heads) * cfg.head_dim, kvd = size_t(cfg.n_kv_heads) * cfg.head_dim;
  x = GpuBuffer<float>(C * E);
  proj = GpuBuffer<float>(C * E);
  q = GpuBuffer<float>(C * qd);
  k = GpuBuffer<float>(C * kvd);
  v = GpuBuffer<float>(C * kvd);
  att = GpuBuffer<float>(C * qd);
  gate = GpuBuffer<float>(C * F);
  up = GpuBuffer<float>(C * F);
  logits = GpuBuffer<float>(size_t(kLogitRows) * cfg.vocab_size);
  cos = GpuBuffer<float>(C * cfg.head_dim / 2);
  sin = GpuBuffer<float>(C * cfg.head_dim / 2);
  xn16 = GpuBuffer<uint16_t>(C * E);
  att16 = GpuBuffer<uint16_t>(C * qd);
  act16 = GpuBuffer<uint16_t>(C * F);
  tokens = GpuBuffer<int32_t>(C);
  positions.resize(C);
  spans.resize(cfg.n_kv_heads);
}

void GpuForward::Impl::count_weights() {
  weight_bytes = tok_embd.bytes() + output.bytes() + output_norm.bytes();
  for (const GpuLayer& l : layers)
    weight_bytes += l.attn_norm.bytes() + l.ffn_norm.bytes() + l.bq.bytes() + l.bk.bytes() +
                    l.bv.bytes() + l.wq.bytes() + l.wk.bytes() + l.wv.bytes() + l.wo.bytes() +
                    l.w_gate.bytes() + l.w_up.bytes() + l.w_down.bytes();
}

void GpuForward::Impl::attention_block(GpuCache& cache, uint32_t layer, uint32_t T,
                                       GpuAttentionObserver* obs) {
  const GpuLayer& lw = layers[layer];
  const uint32_t E = cfg.d_model, D = cfg.head_dim, Hq = cfg.n_heads, Hkv = cfg.n_kv_heads;
  kernels::cuda::rms_norm_bf16(
      kernels::RmsNormArgs{x.data(), lw.attn_norm.data(), nullptr, T, E, cfg.rms_eps}, xn16.data(),
      stream);
  auto bias = [](const GpuBuffer<float>& b) { return b.size() ? b.data() : nullptr; };
  kernels::cuda::gemm_bf16(
      kernels::GemmBf16Args{xn16.data(), lw.wq.data(), bias(lw.bq), q.data(), T, E, Hq * D},
      stream);
  kernels::cuda::gemm_bf16(
      kernels::GemmBf16Args{xn16.data(), lw.wk.data(), bias(lw.bk), k.data(), T, E, Hkv * D},
      stream);
  kernels::cuda::gemm_bf16(
      kernels::GemmBf16Args{xn16.data(), lw.wv.data(), bias(lw.bv), v.data(), T, E, Hkv * D},
      stream);
  kernels::rope(ex(), kernels::RopeArgs{q.data(), cos.data(), sin.data(), T, Hq, D});
  kernels::rope(ex(), kernels::RopeArgs{k.data(), cos.data(), sin.data(), T, Hkv, D});

  cache.append(layer, k.data(), v.data(), T, stream);
  for (uint32_t h = 0; h < Hkv; ++h) {
    spans[h] = kernels::KvSpan{cache.k(layer, h), cache.v(layer, h), cache.len(layer, h)};
    spans[h].quant = cache.quant(layer, h);  // a q8/q4 base's rows, attended as stored
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  attention(ex(), kernels::AttentionArgs{q.data(), spans.data(), att.data(), T, Hq, Hkv, D, scale});
  if (obs)
    obs->on_attention(GpuAttentionObservation{layer, q.data(), positions[0], T, Hq, Hkv, D, scale,
                                              &cache, stream});
  kernels::cuda::to_bf16(att.data(), att16.data(), size_t(T) * Hq * D, stream);
  kernels::cuda::gemm_bf16(
      kernels::GemmBf16Args{att16.data(), lw.wo.data(), nullptr, proj.data(), T, Hq * D, E},
      stream);
  kernels::cuda::add_in_place(x.data(), proj.data(), size_t(T) * E, stream);
}

void GpuForward::Impl::ffn_block(uint32_t layer, uint32_t T) {
  const GpuLayer& lw = layers[layer];
  const uint32_t E = cfg.d_model, F = cfg.d_ffn;
  kernels::cuda::rms_norm_bf16(
      kernels::RmsNormArgs{x.data(), lw.ffn_norm.data(), nullptr, T, E, cfg.rms_eps}, xn16.data(),
      stream);
  kernels::cuda::gemm_bf16(
      kernels::GemmBf16Args{xn16.data(), lw.w_gate.data(), nullptr, gate.data(), T, E, F}, stream);
  kernels::cuda::gemm_bf16(
      kernels::GemmBf16Args{xn16.data(), lw.w_up.data(), nullptr, up.data(), T, E, F}, stream);
  kernels::cuda::swiglu_bf16(kernels::SwigluArgs{gate.data(), up.data(), nullptr, size_t(T) * F},
                             act16.data(), stream);
  kernels::cuda::gemm_bf16(
      kernels::GemmBf16Args{act16.data(), lw.w_down.data(), nullptr, proj.data(), T, F, E}, stream);
  kernels::cuda::add_in_place(x.data(), proj.data(), size_t(T) * E, stream);
}

void GpuForward::Impl::lm_head_rows(uint32_t row0, uint32_t n, float* host_logits) {
  const uint32_t E = cfg.d_model, V = cfg.vocab_size;
  for (uint32_t r = 0; r < n; r += kLogitRows) {
    const uint32_t m = std::min(kLogitRows, n - r);
    kernels::cuda::rms_norm_bf16(
        kernels::RmsNormArgs{x.data() + size_t(row0 + r) * E, output_norm.data(), nullptr, m, E,
                             cfg.rms_eps},
        xn16.data(), stream);
    kernels::cuda::gemm_bf16(
        kernels::GemmBf16Args{xn16.data(), lm_head(), nullptr, logits.data(), m, E, V}, stream);
    kernels::gpu::copy_to_host(host_logits + size_t(r) * V, logits.data(),
                               size_t(m) * V * sizeof(float), stream);
  }
}

void GpuForward::Impl::run_chunk(GpuCache& cache, const int32_t* host_tokens, uint32_t T,
                                 GpuAttentionObserver* observer) {
  cache.reserve_append(T, stream);
  std::iota(positions.begin(), positions.begin() + T, cache.logical_length());
  build_rope_table(inv_freq, positions.data(), T, &rope);
  kernels::gpu::copy_to_device(cos.data(), rope.cos.data(), rope.cos.size() * sizeof(float),
                               stream);
  kernels::gpu::copy_to_device(sin.data(), rope.sin.data(), rope.sin.size() * sizeof(float),
                               stream);
  kernels::gpu::copy_to_device(tokens.data(), host_tokens, size_t(T) * sizeof(int32_t), stream);
  kernels::cuda::embed_bf16(tok_embd.data(), tokens.data(), x.data(), T, cfg.d_model, stream);
  for (uint32_t l = 0; l < cfg.n_layers; ++l) {
    attention_block(cache, l, T, observer);
    ffn_block(l, T);
  }
  cache.commit_append(T);
}

GpuForward::GpuForward(const Weights& w, GpuForwardOptions options) {
  detail::validate_weights(w);
  impl_ = std::make_unique<Impl>(w.config, options);
  Impl& m = *impl_;
  m.tok_embd = upload_bf16(w.tok_embd);
  if (!w.output.empty()) m.output = upload_bf16(w.output);
  m.output_norm = upload_f32(w.output_norm);
  for (const LayerWeights& l : w.layers) {
    GpuLayer g;
    g.attn_norm = upload_f32(l.attn_norm);
    g.ffn_norm = upload_f32(l.ffn_norm);
    if (!l.bq.empty()) g.bq = upload_f32(l.bq);
    if (!l.bk.empty()) g.bk = upload_f32(l.bk);
    if (!l.bv.empty()) g.bv = upload_f32(l.bv);
    g.wq = upload_bf16(l.wq);
    g.wk = upload_bf16(l.wk);
    g.wv = upload_bf16(l.wv);
    g.wo = upload_bf16(l.wo);
    g.w_gate = upload_bf16(l.w_gate);
    g.w_up = upload_bf16(l.w_up);
    g.w_down = upload_bf16(l.w_down);
    m.layers.push_back(std::move(g));
  }
  m.alloc_scratch();
  m.count_weights();
}

GpuForward::GpuForward(const ModelConfig& c, uint64_t seed, GpuForwardOptions options) {
  impl_ = std::make_unique<Impl>(c, options);
  Impl& m = *impl_;
  void* s = m.stream;
  const size_t E = c.d_model, F = c.d_ffn, qd = size_t(c.n_heads) * c.head_dim;
  const size_t kvd = size_t(c.n_kv_heads) * c.head_dim;
  const float bE = 1.0f / std::sqrt(float(E)), bQ = 1.0f / std::sqrt(float(qd));
  const float bF = 1.0f / std::sqrt(float(F));
  uint64_t sd = seed * 1000003u;
  m.tok_embd = random_bf16(size_t(c.vocab_size) * E, ++sd, 1.0f, s);
  if (!c.tied_embeddings) m.output = random_bf16(size_t(c.vocab_size) * E, ++sd, bE, s);
  m.output_norm = random_f32(E, ++sd, 0.9f, 1.1f, s);
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    GpuLayer g;
    g.attn_norm = random_f32(E, ++sd, 0.9f, 1.1f, s);
    g.ffn_norm = random_f32(E, ++sd, 0.9f, 1.1f, s);
    if (c.qkv_bias) {
      g.bq = random_f32(qd, ++sd, -0.1f, 0.1f, s);
      g.bk = random_f32(kvd, ++sd, -0.1f, 0.1f, s);
      g.bv = random_f32(kvd, ++sd, -0.1f, 0.1f, s);
    }
    g.wq = random_bf16(qd * E, ++sd, bE, s);
    g.wk = random_bf16(kvd * E, ++sd, bE, s);
    g.wv = random_bf16(kvd * E, ++sd, bE, s);
    g.wo = random_bf16(E * qd, ++sd, bQ, s);
    g.w_gate = random_bf16(F * E, ++sd, bE, s);
    g.w_up = random_bf16(F * E, ++sd, bE, s);
    g.w_down = random_bf16(E * F, ++sd, bF, s);
    m.layers.push_back(std::move(g));
  }
  m.alloc_scratch();
  m.count_weights();
  kernels::gpu::synchronize(s);
}

GpuForward::~GpuForward() = default;

std::vector<float> GpuForward::prefill(GpuCache& cache, std::span<const int32_t> tokens,
                                       LogitsMode mode, GpuAttentionObserver* observer) {
  Impl& m = *impl_;
  if (observer && cache.quantized())  // an observer reads the cache's f32 rows only (cache.k/v)
    throw Error(Errc::unsupported,
                "GpuForward::prefill: an attention observer over a cache with a q8/q4 base would "
                "miss its quantized rows; observe a cache with f32 rows only");
  return detail::forward_in_chunks(
      m.cfg, cache, tokens, mode, m.opt.chunk,
      [&](const int32_t* chunk, uint32_t T, uint32_t row0, uint32_t rows, float* out) {
        m.run_chunk(cache, chunk, T, observer);
        if (rows) m.lm_head_rows(row0, rows, out);
      },
      [&] { kernels::gpu::synchronize(m.stream); });
}

std::vector<float> GpuForward::decode(GpuCache& cache, int32_t token) {
  return prefill(cache, std::span<const int32_t>(&token, 1), LogitsMode::Last);
}

const ModelConfig& GpuForward::config() const { return impl_->cfg; }
void* GpuForward::stream() { return impl_->stream; }
void GpuForward::synchronize() { kernels::gpu::synchronize(impl_->stream); }
uint64_t GpuForward::weight_bytes() const { return impl_->weight_bytes; }

#else  // CPU-only build

struct GpuForward::Impl {
  ModelConfig cfg;
};

namespace {
[[noreturn]] void no_cuda() {
  throw Error(Errc::unsupported,
              "GpuForward: this kvzip was built without CUDA; rebuild with -DKVZIP_CUDA=ON or run "
              "it on the CPU");
}
}  // namespace

GpuForward::GpuForward(const Weights&, GpuForwardOptions) { no_cuda(); }
GpuForward::GpuForward(const ModelConfig&, uint64_t, GpuForwardOptions) { no_cuda(); }
GpuForward::~GpuForward() = default;
std::vector<float> GpuForward::prefill(GpuCache&, std::span<const int32_t>, LogitsMode,
                                       GpuAttentionObserver*) {
  no_cuda();
}
std::vector<float> GpuForward::decode(GpuCache&, int32_t) { no_cuda(); }
const ModelConfig& GpuForward::config() const { return impl_->cfg; }
void* GpuForward::stream() { return nullptr; }
void GpuForward::synchronize() {}
uint64_t GpuForward::weight_bytes() const { return 0; }

#endif

GenerateResult generate(GpuForward& forward, GpuCache& cache, std::span<const int32_t> prompt,
                        const GenerateParams& params, const TokenCallback& on_token) {
  if (params.rkv)
    throw Error(Errc::unsupported, "generate: R-KV bounded generation runs on the CPU only");
  return detail::generate_loop(forward, cache, prompt, params, on_token);
}

}  // namespace kvzip::model
