// Forward: validates inputs, splits a prefill into chunks, and per chunk builds the RoPE table,
// runs the layers (model/detail/forward_layer.cc), commits the cache append and computes the
// requested logits. Any failure rolls the cache back to its length at the start of the call.
#include "model/forward.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "common/error.h"
#include "kernels/gemm.h"
#include "kernels/thread_pool.h"
#include "model/detail/forward_check.h"
#include "model/detail/forward_layer.h"

namespace kvzip {

struct Forward::Impl {
  const Weights& w;
  ForwardOptions opt;
  ThreadPool pool;
  std::vector<float> inv_freq;  // (D/2)
  detail::ForwardScratch scratch;
  RopeTable rope;
  std::vector<uint32_t> positions;  // (chunk)

  Impl(const Weights& weights, ForwardOptions o) : w(weights), opt(std::move(o)), pool(opt.threads) {}

  void run_chunk(AttentionCache& cache, const int32_t* tokens, uint32_t T, uint32_t logits_row0,
                 uint32_t logits_rows, float* logits, AttentionObserver* observer);
};

Forward::Forward(const Weights& weights, ForwardOptions options) {
  detail::validate_weights(weights);
  if (options.chunk == 0)
    throw Error(Errc::invalid_argument, "ForwardOptions.chunk is 0, expected >= 1 (default 512)");
  impl_ = std::make_unique<Impl>(weights, std::move(options));
  const ModelConfig& c = weights.config;
  impl_->inv_freq = rope_inv_freq(c.head_dim, c.rope_base, c.rope_scaling);
  impl_->scratch.resize(c, impl_->opt.chunk);
  impl_->positions.resize(impl_->opt.chunk);
  set_blas_threads(impl_->pool.size());
}

Forward::~Forward() = default;

const ModelConfig& Forward::config() const { return impl_->w.config; }
const Weights& Forward::weights() const { return impl_->w; }
uint32_t Forward::threads() const { return impl_->pool.size(); }
MatmulPath Forward::matmul_path() const { return impl_->opt.matmul; }
ThreadPool& Forward::pool() { return impl_->pool; }

void Forward::Impl::run_chunk(AttentionCache& cache, const int32_t* tokens, uint32_t T,
                              uint32_t logits_row0, uint32_t logits_rows, float* logits,
                              AttentionObserver* observer) {
  cache.reserve_append(T);  // first: it rejects a length that would overflow the positions
  std::iota(positions.begin(), positions.begin() + T, cache.logical_length());
  build_rope_table(inv_freq, positions.data(), T, &rope);
  detail::ChunkContext c;
  c.w = &w;
  c.ex = Exec{Device::Cpu, &pool};
  c.trace = &opt.trace;
  c.cache = &cache;
  c.observer = observer;
  c.rope = &rope;
  c.positions = positions.data();
  c.T = T;
  c.s = &scratch;
  c.path = opt.matmul;
  c.last_output_unused = logits_rows == 0 && !(opt.trace);
  detail::embed(c, tokens);
  for (uint32_t l = 0; l < w.config.n_layers; ++l) detail::run_layer(c, l);
  cache.commit_append(T);
  if (logits_rows) detail::lm_head(c, logits_row0, logits_rows, logits);
}

std::vector<float> Forward::prefill(AttentionCache& cache, std::span<const int32_t> tokens,
                                    LogitsMode mode, AttentionObserver* observer) {
  const ModelConfig& cfg = impl_->w.config;
  detail::check_forward_inputs(cfg, cache.shape(), tokens);
  const size_t V = cfg.vocab_size, n = tokens.size();
  std::vector<float> logits;
  if (mode == LogitsMode::Last && n > 0) logits.resize(V);
  if (mode == LogitsMode::All) logits.resize(n * V);

  const uint32_t start = cache.logical_length();
  try {
    for (size_t off = 0; off < n; off += impl_->opt.chunk) {
      const uint32_t T = static_cast<uint32_t>(std::min<size_t>(impl_->opt.chunk, n - off));
      uint32_t row0 = 0, rows = 0;
      float* out = nullptr;
      if (mode == LogitsMode::All) {
        rows = T;
        out = logits.data() + off * V;
      } else if (mode == LogitsMode::Last && off + T == n) {
        row0 = T - 1;
        rows = 1;
        out = logits.data();
      }
      impl_->run_chunk(cache, tokens.data() + off, T, row0, rows, out, observer);
    }
  } catch (...) {
    cache.rollback(start);
    throw;
  }
  return logits;
}

std::vector<float> Forward::decode(AttentionCache& cache, int32_t token, AttentionObserver* observer) {
  return prefill(cache, std::span<const int32_t>(&token, 1), LogitsMode::Last, observer);
}

}  // namespace kvzip
