// The baseline scorers of spec/methods.md §2: full (no eviction), random (seeded), streaming (sinks
// + most recent), SnapKV (the document's last W queries, summed probabilities, 1-D max-pool) and
// H2O (attention accumulated over the whole prefill + a recent window). SnapKV and H2O observe the
// document's prefill through prefill_observer(); rows a method always keeps score +inf.
#include <algorithm>
#include <limits>
#include <random>
#include <string>

#include "common/error.h"
#include "compress/detail/scorers.h"
#include "compress/selection.h"
#include "kernels/attention_stats.h"
#include "kernels/thread_pool.h"

namespace kvzip::compress::detail {

void PrefillWatch::arm(uint32_t n_layers, uint32_t n_prefix, uint32_t n_doc) {
  seen_.assign(n_layers, 0);
  n_prefix_ = n_prefix;
  n_doc_ = n_doc;
  armed_ = true;
}

void PrefillWatch::advance(const model::AttentionObservation& obs) {
  const uint32_t p0 = obs.positions[0];
  KVZIP_ASSERT(obs.layer < seen_.size());
  if (p0 != seen_[obs.layer] || p0 + obs.T > total())
    throw Error(Errc::invalid_argument,
                "scorer observer: expected tokens from position " +
                    std::to_string(seen_[obs.layer]) + " of a " + std::to_string(total()) +
                    "-token prefill, got " + std::to_string(obs.T) + " tokens at " +
                    std::to_string(p0) + "; attach the observer to the document prefill only");
  seen_[obs.layer] = p0 + obs.T;
}

void PrefillWatch::check(const ScoreInput& in, const char* method, const char* needs) const {
  check_score_input(in, method);
  if (!armed_ || n_prefix_ != in.n_prefix || n_doc_ != in.document.size())
    throw Error(Errc::invalid_argument, std::string(method) + " " + needs +
                                            ": call prefill_observer(forward, n_prefix, "
                                            "n_doc) and run the document prefill with it first");
  for (uint32_t l = 0; l < seen_.size(); ++l)
    if (seen_[l] != total())
      throw Error(Errc::invalid_argument, std::string(method) + " " + needs +
                                              ": run the document prefill with the "
                                              "scorer's prefill_observer() (layer " +
                                              std::to_string(l) + " observed " +
                                              std::to_string(seen_[l]) + " of " +
                                              std::to_string(total()) + " tokens)");
}

void require_positive(const char* what, uint32_t v, uint32_t dflt) {
  if (v == 0)
    throw Error(Errc::invalid_argument,
                std::string(what) + " is 0, expected >= 1 (default " + std::to_string(dflt) + ")");
}

void require_odd(const char* what, uint32_t v, uint32_t dflt) {
  if (v % 2 == 0)
    throw Error(Errc::invalid_argument, std::string(what) + " is " + std::to_string(v) +
                                            ", expected an odd number >= 1 (default " +
                                            std::to_string(dflt) + ")");
}

void check_score_input(const ScoreInput& in, const char* method) {
  if (!in.forward || !in.cache)
    throw Error(Errc::invalid_argument,
                std::string(method) + ": ScoreInput needs the forward and the prefilled cache");
  const uint64_t want = uint64_t(in.n_prefix) + in.document.size();
  if (in.cache->logical_length() != want)
    throw Error(Errc::invalid_argument,
                std::string(method) + ": the cache holds " +
                    std::to_string(in.cache->logical_length()) + " tokens, expected the prefix (" +
                    std::to_string(in.n_prefix) + ") + the document (" +
                    std::to_string(in.document.size()) + "); prefill exactly [prefix ; document]");
  if (!(in.cache->shape() == model::cache_shape(in.forward->config())))
    throw Error(Errc::invalid_argument,
                std::string(method) + ": the cache was not made for this model's shape");
}

DocumentScores make_scores(const ScoreInput& in, float fill) {
  DocumentScores s;
  s.shape = in.cache->shape();
  s.n_prefix = in.n_prefix;
  s.n_doc = static_cast<uint32_t>(in.document.size());
  s.values.assign(size_t(s.shape.n_layers) * s.shape.n_kv_heads * s.n_doc, fill);
  set_hybrid_layout(s, in.forward->config());
  return s;
}

namespace {

constexpr float kAlwaysKeep = std::numeric_limits<float>::infinity();

class FullScorer final : public Scorer {
 public:
  std::string name() const override { return "full"; }
  MethodParams params() const override { return {}; }
  DocumentScores score(const ScoreInput& in) override {
    check_score_input(in, "full");
    return make_scores(in, 1.0f);
  }
};

class RandomScorer final : public Scorer {
 public:
  explicit RandomScorer(uint64_t seed) : seed_(seed) {}
  std::string name() const override { return "random"; }
  MethodParams params() const override { return {{"seed", std::to_string(seed_)}}; }
  DocumentScores score(const ScoreInput& in) override {
    check_score_input(in, "random");
    DocumentScores s = make_scores(in, 0.0f);
    std::mt19937_64 rng(seed_);
    for (float& x : s.values) x = static_cast<float>(rng() >> 40) * 0x1.0p-24f;  // [0, 1)
    return s;
  }

 private:
  uint64_t seed_;
};

class StreamingScorer final : public Scorer {
 public:
  explicit StreamingScorer(uint32_t sink) : sink_(sink) {}
  std::string name() const override { return "streaming"; }
  MethodParams params() const override { return {{"sink", std::to_string(sink_)}}; }
  DocumentScores score(const ScoreInput& in) override {
    check_score_input(in, "streaming");
    DocumentScores s = make_scores(in, 0.0f);
    const size_t n = s.n_doc;
    for (size_t i = 0; i < s.values.size(); ++i) {
      const size_t j = i % n;
      s.values[i] = j < sink_ ? kAlwaysKeep : static_cast<float>(j);  // later = more recent
    }
    return s;
  }

 private:
  uint32_t sink_;
};

// Sums, per (layer, KV head, key row), the softmax probabilities the observed queries give each
// key over all rows they attend to (GQA group summed). Queries: positions >= first_query.
class AccumulatingObserver final : public model::AttentionObserver {
 public:
  void reset(const ModelConfig& cfg, uint32_t n_prefix, uint32_t n_doc, uint32_t first_query,
             kernels::ThreadPool* pool) {
    const model::CacheShape shape = model::cache_shape(cfg);
    shape_ = shape;
    local_ = cfg.local_layers;
    first_query_ = first_query;
    pool_ = pool;
    watch_.arm(shape.n_layers, n_prefix, n_doc);
    acc_.assign(size_t(shape.n_layers) * shape.n_kv_heads * watch_.total(), 0.0f);
  }

  void on_attention(const model::AttentionObservation& obs) override {
    KVZIP_ASSERT(obs.layer < shape_.n_layers && obs.Hkv == shape_.n_kv_heads);
    const uint32_t p0 = obs.positions[0], total = watch_.total();
    watch_.advance(obs);
    const uint32_t t0 = first_query_ > p0 ? first_query_ - p0 : 0;
    if (t0 >= obs.T) return;
    // Sliding-window layers are not scored (selection keeps their reachable rows), and a long
    // prefill trims their rows to the window (cache/kv_cache.h).
    if (obs.layer < local_.size() && local_[obs.layer]) return;
    std::vector<kernels::ScoreKeyAxis> axes(obs.Hkv);
    for (uint32_t h = 0; h < obs.Hkv; ++h) {
      const model::KvHeadView v = obs.cache->view(obs.layer, h);
      KVZIP_ASSERT(v.len == p0 + obs.T);  // dense: row == position
      axes[h].ranges[0] = kernels::ScoreKeyRange{v.k, v.len};
      axes[h].n_ranges = 1;
      axes[h].causal_base = v.len - obs.T;
    }
    const kernels::AttentionStatsArgs a{.q = obs.q,
                                        .T = obs.T,
                                        .Hq = obs.Hq,
                                        .Hkv = obs.Hkv,
                                        .D = obs.D,
                                        .scale = obs.scale,
                                        .t0 = t0,
                                        .t1 = obs.T,
                                        .axes = axes.data(),
                                        .col0 = 0,
                                        .col1 = p0 + obs.T,
                                        .reduce = kernels::Reduce::Sum,
                                        .out = acc_.data() + size_t(obs.layer) * obs.Hkv * total,
                                        .out_stride = total};
    attention_stats(kernels::Exec{kernels::Device::Cpu, pool_}, a);
  }

  // The accumulated rows, once the watch confirms that `in` is the observed, complete prefill.
  const AccumulatingObserver& checked(const ScoreInput& in, const char* method) const {
    watch_.check(in, method, "scores from the prefill's attention");
    return *this;
  }
  const float* acc_row(uint32_t l, uint32_t h) const {
    return acc_.data() + (size_t(l) * shape_.n_kv_heads + h) * watch_.total();
  }

 private:
  model::CacheShape shape_;
  uint32_t first_query_ = 0;
  std::vector<uint8_t> local_;  // (L) 1 = sliding-window layer
  kernels::ThreadPool* pool_ = nullptr;
  PrefillWatch watch_;
  std::vector<float> acc_;  // (L, Hkv, total)
};

// Base of the two observing scorers: prefill_observer() arms a fresh accumulator.
class ObservingScorer : public Scorer {
 public:
  model::AttentionObserver* prefill_observer(model::Forward& forward, uint32_t n_prefix,
                                             uint32_t n_doc) override {
    obs_.reset(forward.config(), n_prefix, n_doc, first_query(n_prefix, n_doc), &forward.pool());
    return &obs_;
  }

 protected:
  virtual uint32_t first_query(uint32_t n_prefix, uint32_t n_doc) const = 0;
  const AccumulatingObserver& observed(const ScoreInput& in, const char* method) const {
    return obs_.checked(in, method);
  }

 private:
  AccumulatingObserver obs_;
};

// SnapKV, offline: the document's last W tokens are the observation window. Their probabilities
// over every earlier key (GQA group and window summed) are max-pooled with a centred kernel over
// the keys before the window (prefix included, as SnapKV pools over everything before it); the
// window itself is always kept.
class SnapKvScorer final : public ObservingScorer {
 public:
  SnapKvScorer(uint32_t window, uint32_t kernel) : window_(window), kernel_(kernel) {}
  std::string name() const override { return "snapkv"; }
  MethodParams params() const override {
    return {{"window", std::to_string(window_)},
            {"kernel", std::to_string(kernel_)},
            {"pooling", "max"}};
  }
  DocumentScores score(const ScoreInput& in) override {
    const AccumulatingObserver& obs = observed(in, "snapkv");
    DocumentScores s = make_scores(in, kAlwaysKeep);
    const uint32_t n_p = s.n_prefix, n_c = s.n_doc, w = std::min(window_, n_c);
    const uint32_t before = n_p + n_c - w;  // keys [0, before) are pooled
    const uint32_t half = kernel_ / 2;
    for (uint32_t l = 0; l < s.shape.n_layers; ++l)
      for (uint32_t h = 0; h < s.shape.n_kv_heads; ++h) {
        const float* a = obs.acc_row(l, h);
        float* out = s.values.data() + (size_t(l) * s.shape.n_kv_heads + h) * n_c;
        for (uint32_t j = 0; j + w < n_c; ++j) {
          const uint32_t c = n_p + j;
          const uint32_t lo = c >= half ? c - half : 0, hi = std::min(before, c + half + 1);
          out[j] = *std::max_element(a + lo, a + hi);
        }
      }
    return s;
  }

 protected:
  uint32_t first_query(uint32_t n_prefix, uint32_t n_doc) const override {
    return n_prefix + n_doc - std::min(window_, n_doc);
  }

 private:
  uint32_t window_, kernel_;
};

// H2O, offline: the attention each key receives, summed over every later query of the prefill
// (itself included) and the GQA group; the document's last `recent` tokens are always kept.
class H2oScorer final : public ObservingScorer {
 public:
  explicit H2oScorer(uint32_t recent) : recent_(recent) {}
  std::string name() const override { return "h2o"; }
  MethodParams params() const override { return {{"recent", std::to_string(recent_)}}; }
  DocumentScores score(const ScoreInput& in) override {
    const AccumulatingObserver& obs = observed(in, "h2o");
    DocumentScores s = make_scores(in, kAlwaysKeep);
    const uint32_t n_p = s.n_prefix, n_c = s.n_doc, r = std::min(recent_, n_c);
    for (uint32_t l = 0; l < s.shape.n_layers; ++l)
      for (uint32_t h = 0; h < s.shape.n_kv_heads; ++h) {
        const float* a = obs.acc_row(l, h);
        float* out = s.values.data() + (size_t(l) * s.shape.n_kv_heads + h) * n_c;
        for (uint32_t j = 0; j + r < n_c; ++j) out[j] = a[n_p + j];
      }
    return s;
  }

 protected:
  uint32_t first_query(uint32_t, uint32_t) const override { return 0; }

 private:
  uint32_t recent_;
};

}  // namespace

std::unique_ptr<Scorer> make_full_scorer() { return std::make_unique<FullScorer>(); }

std::unique_ptr<Scorer> make_random_scorer(const ScorerOptions& o) {
  return std::make_unique<RandomScorer>(o.seed);
}

std::unique_ptr<Scorer> make_streaming_scorer(const ScorerOptions& o) {
  return std::make_unique<StreamingScorer>(o.sink);
}

std::unique_ptr<Scorer> make_snapkv_scorer(const ScorerOptions& o) {
  require_positive("snapkv window", o.snapkv_window, 32);
  require_odd("snapkv pooling kernel", o.snapkv_kernel, 7);
  return std::make_unique<SnapKvScorer>(o.snapkv_window, o.snapkv_kernel);
}

std::unique_ptr<Scorer> make_h2o_scorer(const ScorerOptions& o) {
  return std::make_unique<H2oScorer>(o.h2o_recent);
}

}  // namespace kvzip::compress::detail
