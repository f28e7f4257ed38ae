// The compress pipeline on a CUDA device (pipeline.h, compress_gpu): the dense prefill (in the
// same chunks and with the same progress reports as on the CPU) and KVzip's reconstruction passes
// run in GpuForward; a GPU observer reduces every layer's local attention with
// attention_score_max into device scores (L, Hkv, n_c), which are copied back once. The checks
// before and the selection, eviction and result after are the CPU pipeline's (detail/pipeline.h).
#include <algorithm>
#include <chrono>
#include <limits>
#include <string>
#include <vector>

#include "common/error.h"
#include "compress/detail/pipeline.h"
#include "compress/detail/scorers.h"
#include "compress/pipeline.h"
#include "kernels/attention_score.h"
#include "kernels/gpu.h"

namespace kvzip::compress {
namespace {

// Per layer: for every KV head the local key axis [prefix ; chunk t ; R_t so far] of the dense
// device cache (row == position), max-reduced into the chunk's slice of the device scores.
class GpuKvzipObserver final : public model::GpuAttentionObserver {
 public:
  GpuKvzipObserver(float* scores, uint32_t n_prefix, uint32_t n_doc)
      : scores_(scores), n_p_(n_prefix), n_c_(n_doc) {}

  void set_chunk(uint32_t begin, uint32_t end, uint32_t r0) {
    begin_ = begin;
    end_ = end;
    r0_ = r0;
  }

  void on_attention(const model::GpuAttentionObservation& obs) override {
    const uint32_t Hkv = obs.Hkv, D = obs.D, m = end_ - begin_;
    std::vector<kernels::ScoreKeyAxis> axes(Hkv);
    for (uint32_t h = 0; h < Hkv; ++h) {
      const uint32_t len = obs.cache->len(obs.layer, h);
      const uint32_t p0 = len - obs.T;  // dense: the T new rows are the last ones
      KVZIP_ASSERT(p0 >= r0_ && obs.first_position == p0);
      const float* k = obs.cache->k(obs.layer, h);
      axes[h].ranges[0] = kernels::ScoreKeyRange{k, n_p_};
      axes[h].ranges[1] = kernels::ScoreKeyRange{k + size_t(n_p_ + begin_) * D, m};
      axes[h].ranges[2] = kernels::ScoreKeyRange{k + size_t(r0_) * D, p0 - r0_ + obs.T};
      axes[h].n_ranges = 3;
      axes[h].causal_base = p0 - r0_;
    }
    kernels::AttentionScoreArgs a;
    a.q = obs.q;
    a.T = obs.T;
    a.Hq = obs.Hq;
    a.Hkv = Hkv;
    a.D = D;
    a.scale = obs.scale;
    a.axes = axes.data();
    a.col0 = n_p_;
    a.col1 = n_p_ + m;
    a.out = scores_ + size_t(obs.layer) * Hkv * n_c_ + begin_;
    a.out_stride = n_c_;
    attention_score_max(kernels::Exec{kernels::Device::Cuda, nullptr, obs.stream}, a);
  }

 private:
  float* scores_;
  uint32_t n_p_, n_c_;
  uint32_t begin_ = 0, end_ = 0, r0_ = 0;
};

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

DocumentScores kvzip_scores_gpu(model::GpuForward& forward, model::GpuCache& cache,
                                uint32_t n_prefix, std::span<const int32_t> document,
                                const ScorerOptions& options) {
  (void)detail::make_kvzip_scorer(options);  // the CPU scorer's checks of prompts and chunk
  const uint32_t n_c = static_cast<uint32_t>(document.size()), full = n_prefix + n_c;
  if (cache.logical_length() != full)
    throw Error(Errc::invalid_argument,
                "kvzip_scores_gpu: the cache holds " + std::to_string(cache.logical_length()) +
                    " tokens, expected prefix + document = " + std::to_string(full));
  DocumentScores s;
  s.shape = cache.shape();
  s.n_prefix = n_prefix;
  s.n_doc = n_c;
  const size_t n = size_t(s.shape.n_layers) * s.shape.n_kv_heads * n_c;
  kernels::gpu::GpuBuffer<float> scores(n);
  kernels::gpu::fill_zero(scores.data(), scores.bytes(),
                          forward.stream());  // 0: the max's identity
  GpuKvzipObserver obs(scores.data(), n_prefix, n_c);
  const uint32_t m = options.kvzip_chunk;
  for (uint32_t begin = 0; begin < n_c; begin += m) {
    const uint32_t end = std::min(n_c, begin + m);
    const std::vector<int32_t> r = reconstruction_input(options.prompts, document, begin, end,
                                                        std::min(options.kvzip_hint, m));
    obs.set_chunk(begin, end, full);
    forward.prefill(cache, r, model::LogitsMode::None, &obs);  // rolls back itself when it throws
    cache.rollback(full);
  }
  s.values.resize(n);
  kernels::gpu::copy_to_host(s.values.data(), scores.data(), scores.bytes(), forward.stream());
  return s;
}

CompressResult compress_gpu(model::GpuForward& forward, std::span<const int32_t> prefix,
                            std::span<const int32_t> document, const CompressOptions& options) {
  check_device(options, kernels::Device::Cuda);
  const bool full = options.method == "full";
  if (options.prefill.observer)
    throw Error(Errc::unsupported,
                "compress_gpu: a prefill observer reads host memory; observe a "
                "prefill on the CPU");
  std::unique_ptr<Scorer> scorer =
      detail::checked_scorer(forward.config(), prefix.size(), document.size(), options);
  const uint32_t n_p = static_cast<uint32_t>(prefix.size());
  const uint32_t n_c = static_cast<uint32_t>(document.size());

  // Room for the answer and for the longest R_t (chunk + prompt + hint), so no pass regrows it.
  const uint32_t room =
      std::max<uint32_t>(options.prefill.answer_room, options.scorer.kvzip_chunk + 256);
  model::GpuCache cache(model::cache_shape(forward.config()), n_p + n_c + room);
  const double prefill_s = prefill::prefill_in_chunks(
      prefix, document, options.prefill, [&](std::span<const int32_t> chunk) {
        forward.prefill(cache, chunk, model::LogitsMode::None);
      });

  const auto t = std::chrono::steady_clock::now();
  DocumentScores scores;
  if (full) {
    scores.shape = cache.shape();
    scores.n_prefix = n_p;
    scores.n_doc = n_c;
    scores.values.assign(size_t(scores.shape.n_layers) * scores.shape.n_kv_heads * n_c, 1.0f);
  } else {
    scores = kvzip_scores_gpu(forward, cache, n_p, document, options.scorer);
  }
  const double scoring_s = seconds_since(t);

  const auto t_copy = std::chrono::steady_clock::now();
  const model::KvCache dense = cache.to_host_dense(forward.stream());
  const double copy_s = seconds_since(t_copy);  // counted with the selection, as it serves it
  CompressResult r = detail::finish(options, *scorer, dense, scores, prefill_s, scoring_s);
  r.select_s += copy_s;
  r.params.emplace_back("device", "cuda");
  return r;
}

}  // namespace kvzip::compress
