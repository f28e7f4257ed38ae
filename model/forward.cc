// Forward: validates inputs, splits a prefill into chunks, and per chunk builds the RoPE table,
// runs the layers (model/detail/forward_layer.cc), commits the cache append and computes the
// requested logits. Any failure rolls the cache back to its length at the start of the call.
#include "model/forward.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <string_view>

#include "common/error.h"
#include "kernels/gemm.h"
#include "kernels/thread_pool.h"
#include "model/detail/chunk_loop.h"
#include "model/detail/forward_check.h"
#include "model/detail/forward_layer.h"

namespace kvzip::model {

struct Forward::Impl {
  const Weights& w;
  ForwardOptions opt;
  kernels::ThreadPool pool;
  std::vector<float> inv_freq;        // (D/2)
  std::vector<float> inv_freq_local;  // (D/2) local layers' (hybrid models), else empty
  detail::ForwardScratch scratch;
  kernels::RopeTable rope;
  kernels::RopeTable rope_local;
  std::vector<uint32_t> positions;  // (chunk)

  Impl(const Weights& weights, ForwardOptions o)
      : w(weights), opt(std::move(o)), pool(opt.threads) {}

  // step(): reused buffers (the items' rows, their tokens, the logits of the rows that want them).
  std::vector<detail::ChunkItem> step_items;
  std::vector<int32_t> step_tokens;
  std::vector<float> step_logits;
  bool prompt_bf16 = false;  // set_prompt_bf16

  void run_chunk(AttentionCache& cache, const int32_t* tokens, uint32_t T, uint32_t logits_row0,
                 uint32_t logits_rows, float* logits, AttentionObserver* observer);
  void run_step(std::span<const StepItem> items, uint32_t total);
  // The context of one chunk of T rows whose positions are in `positions` (RoPE table built
  // here); the caller sets the cache or the step items and what the last layer may skip.
  detail::ChunkContext context(uint32_t T);
};

Forward::Forward(const Weights& weights, ForwardOptions options) {
  detail::validate_weights(weights);
  if (options.chunk == 0)
    throw Error(Errc::invalid_argument, "ForwardOptions.chunk is 0, expected >= 1 (default 512)");
  impl_ = std::make_unique<Impl>(weights, std::move(options));
  const ModelConfig& c = weights.config;
  impl_->inv_freq = kernels::rope_inv_freq(c.head_dim, c.rope_base, c.rope_scaling);
  if (c.hybrid())
    impl_->inv_freq_local = kernels::rope_inv_freq(c.head_dim, c.rope_local_base, RopeScaling{});
  impl_->scratch.resize(c, impl_->opt.chunk);
  impl_->positions.resize(impl_->opt.chunk);
  kernels::set_blas_threads(impl_->pool.size());
}

Forward::~Forward() = default;

const ModelConfig& Forward::config() const { return impl_->w.config; }
const Weights& Forward::weights() const { return impl_->w; }
uint32_t Forward::threads() const { return impl_->pool.size(); }
kernels::MatmulPath Forward::matmul_path() const { return impl_->opt.matmul; }
kernels::ThreadPool& Forward::pool() { return impl_->pool; }
void Forward::set_prompt_bf16(bool on) { impl_->prompt_bf16 = on; }
bool Forward::prompt_bf16() const { return impl_->prompt_bf16; }

PromptBf16Scope::PromptBf16Scope(Forward& f, bool on) : f_(f), was_(f.prompt_bf16()) {
  f.set_prompt_bf16(on);
}
PromptBf16Scope::~PromptBf16Scope() { f_.set_prompt_bf16(was_); }

detail::ChunkContext Forward::Impl::context(uint32_t T) {
  build_rope_table(inv_freq, positions.data(), T, &rope);
  if (!inv_freq_local.empty()) build_rope_table(inv_freq_local, positions.data(), T, &rope_local);
  detail::ChunkContext c;
  c.w = &w;
  c.ex = kernels::Exec{kernels::Device::Cpu, &pool};
  c.rope = &rope;
  c.rope_local = inv_freq_local.empty() ? &rope : &rope_local;
  c.positions = positions.data();
  c.T = T;
  c.s = &scratch;
  c.path = opt.matmul;
  c.attention_bf16 = prompt_bf16 && opt.matmul == kernels::MatmulPath::Fast;
  return c;
}

void Forward::Impl::run_chunk(AttentionCache& cache, const int32_t* tokens, uint32_t T,
                              uint32_t logits_row0, uint32_t logits_rows, float* logits,
                              AttentionObserver* observer) {
  cache.reserve_append(T);  // first: it rejects a length that would overflow the positions
  cache.next_positions(T, positions.data());
  detail::ChunkContext c = context(T);
  c.trace = &opt.trace;
  c.cache = &cache;
  c.observer = observer;
  c.last_output_unused = logits_rows == 0 && !(opt.trace);
  detail::embed(c, tokens);
  for (uint32_t l = 0; l < w.config.n_layers; ++l) detail::run_layer(c, l);
  cache.commit_append(T);
  if (logits_rows) detail::lm_head(c, logits_row0, logits_rows, logits);
}

std::vector<float> Forward::prefill(AttentionCache& cache, std::span<const int32_t> tokens,
                                    LogitsMode mode, AttentionObserver* observer, uint32_t chunk) {
  if (chunk > impl_->positions.size()) {  // a longer chunk than the options': scratch grows to it
    impl_->scratch.resize(impl_->w.config, chunk);
    impl_->positions.resize(chunk);
  }
  return detail::forward_in_chunks(
      impl_->w.config, cache, tokens, mode, chunk ? chunk : impl_->opt.chunk,
      [&](const int32_t* chunk, uint32_t T, uint32_t row0, uint32_t rows, float* out) {
        impl_->run_chunk(cache, chunk, T, row0, rows, out, observer);
      },
      [] {});
}

std::vector<float> Forward::layer_values(AttentionCache& cache, std::span<const int32_t> tokens,
                                         uint32_t layer) {
  const ModelConfig& cfg = impl_->w.config;
  if (layer >= cfg.n_layers)
    throw Error(Errc::invalid_argument, "Forward::layer_values: layer " + std::to_string(layer) +
                                            " of a " + std::to_string(cfg.n_layers) +
                                            "-layer model");
  detail::check_cache_shape(cfg, cache.shape());
  detail::check_tokens(cfg, tokens);
  const uint32_t T = static_cast<uint32_t>(tokens.size());
  const size_t kvd = size_t(cfg.n_kv_heads) * cfg.head_dim;
  std::vector<float> values(T * kvd);
  if (T == 0) return values;
  if (T > impl_->positions.size()) {  // one chunk: the rows of later layers are never appended
    impl_->scratch.resize(cfg, T);
    impl_->positions.resize(T);
  }
  const uint32_t start = cache.logical_length();
  try {
    cache.reserve_append(T);
    cache.next_positions(T, impl_->positions.data());
    detail::ChunkContext c = impl_->context(T);
    c.cache = &cache;
    detail::embed(c, tokens.data());
    for (uint32_t l = 0; l < layer; ++l) detail::run_layer(c, l);
    detail::layer_v(c, layer);  // the values need nothing of the layer but its norm and V
    std::copy_n(impl_->scratch.v.data(), values.size(), values.data());
  } catch (...) {
    cache.rollback(start);
    throw;
  }
  cache.rollback(start);  // drops the uncommitted rows of layers [0, layer)
  return values;
}

std::vector<float> Forward::decode(AttentionCache& cache, int32_t token,
                                   AttentionObserver* observer) {
  // A decode step is an answer's token, never a prompt's: fp32 attention, the same bits as query's
  // and serve's steps, whatever scope the caller holds for its prompt. (bf16 products would also
  // re-make the whole cache's bf16 key and value tiles at every step.)
  const PromptBf16Scope fp32(*this, false);
  return prefill(cache, std::span<const int32_t>(&token, 1), LogitsMode::Last, observer);
}

}  // namespace kvzip::model

namespace kvzip::model {

void Forward::Impl::run_step(std::span<const StepItem> items, uint32_t total) {
  step_items.clear();
  step_tokens.clear();
  uint32_t row = 0, wanted = 0;
  for (const StepItem& it : items) {
    it.cache->reserve_append(static_cast<uint32_t>(it.tokens.size()));
    const uint32_t T = static_cast<uint32_t>(it.tokens.size());
    it.cache->next_positions(T, positions.data() + row);
    step_items.push_back(detail::ChunkItem{it.cache, row, T});
    step_tokens.insert(step_tokens.end(), it.tokens.begin(), it.tokens.end());
    row += T;
    wanted += it.logits != nullptr;
  }
  detail::ChunkContext c = context(total);
  c.cache = items[0].cache;
  c.items = step_items;
  c.last_output_unused = wanted == 0;
  detail::embed(c, step_tokens.data());
  for (uint32_t l = 0; l < w.config.n_layers; ++l) detail::run_layer(c, l);
  for (const detail::ChunkItem& it : step_items) it.cache->commit_append(it.T);
  if (wanted == 0) return;
  // The rows that want logits move to the front of the residual stream (row k <= its source row,
  // so copying in order never overwrites a row still to be read): one LM-head matmul for all.
  const size_t E = w.config.d_model, V = w.config.vocab_size;
  uint32_t k = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].logits) continue;
    const uint32_t src = step_items[i].row0 + step_items[i].T - 1;
    if (src != k) std::copy_n(scratch.x.data() + src * E, E, scratch.x.data() + k * E);
    ++k;
  }
  step_logits.resize(size_t(wanted) * V);
  detail::lm_head(c, 0, wanted, step_logits.data());
  k = 0;
  for (const StepItem& it : items)
    if (it.logits) std::copy_n(step_logits.data() + size_t(k++) * V, V, it.logits);
}

void Forward::step(std::span<const StepItem> items) {
  if (items.empty()) throw Error(Errc::invalid_argument, "Forward::step: no items");
  uint64_t total = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const StepItem& it = items[i];
    if (!it.cache || it.tokens.empty())
      throw Error(Errc::invalid_argument,
                  "Forward::step: item " + std::to_string(i) + " has no cache or no tokens");
    for (size_t j = 0; j < i; ++j)
      if (items[j].cache == it.cache)
        throw Error(Errc::invalid_argument, "Forward::step: items " + std::to_string(j) + " and " +
                                                std::to_string(i) + " name the same cache");
    detail::check_cache_shape(impl_->w.config, it.cache->shape());
    detail::check_tokens(impl_->w.config, it.tokens);
    total += it.tokens.size();
  }
  if (total > impl_->opt.chunk)
    throw Error(Errc::invalid_argument, "Forward::step: " + std::to_string(total) +
                                            " tokens in one step exceed the chunk of " +
                                            std::to_string(impl_->opt.chunk));
  std::vector<uint32_t> start(items.size());
  for (size_t i = 0; i < items.size(); ++i) start[i] = items[i].cache->logical_length();
  try {
    impl_->run_step(items, static_cast<uint32_t>(total));
  } catch (...) {
    for (size_t i = 0; i < items.size(); ++i) items[i].cache->rollback(start[i]);
    throw;
  }
}

}  // namespace kvzip::model
