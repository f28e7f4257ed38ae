// The baseline scorers of spec/methods.md §2: full (no eviction), random (seeded), streaming (sinks + most
// recent), SnapKV (the document's last W queries, summed probabilities, 1-D max-pool) and H2O
// (attention accumulated over the whole prefill + a recent window). SnapKV and H2O observe the
// document's prefill through prefill_observer(); rows a method always keeps score +inf.
#include <algorithm>
#include <limits>
#include <random>
#include <string>

#include "common/error.h"
#include "compress/detail/attn_stats.h"
#include "compress/detail/scorers.h"
#include "kernels/thread_pool.h"

namespace kvzip::detail {

void advance_prefill(std::vector<uint32_t>& seen, const AttentionObservation& obs, uint32_t total) {
  const uint32_t p0 = obs.positions[0];
  if (p0 != seen[obs.layer] || p0 + obs.T > total)
    throw Error(Errc::invalid_argument,
                "scorer observer: expected tokens from position " + std::to_string(seen[obs.layer]) +
                    " of a " + std::to_string(total) + "-token prefill, got " +
                    std::to_string(obs.T) + " tokens at " + std::to_string(p0) +
                    "; attach the observer to the document prefill only");
  seen[obs.layer] = p0 + obs.T;
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
  if (!(in.cache->shape() == cache_shape(in.forward->config())))
    throw Error(Errc::invalid_argument,
                std::string(method) + ": the cache was not made for this model's shape");
}

DocumentScores make_scores(const ScoreInput& in, float fill) {
  DocumentScores s;
  s.shape = in.cache->shape();
  s.n_prefix = in.n_prefix;
  s.n_doc = static_cast<uint32_t>(in.document.size());
  s.values.assign(size_t(s.shape.n_layers) * s.shape.n_kv_heads * s.n_doc, fill);
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
class AccumulatingObserver final : public AttentionObserver {
 public:
  void reset(CacheShape shape, uint32_t total, uint32_t first_query, ThreadPool* pool) {
    shape_ = shape;
    total_ = total;
    first_query_ = first_query;
    pool_ = pool;
    acc_.assign(size_t(shape.n_layers) * shape.n_kv_heads * total, 0.0f);
    seen_.assign(shape.n_layers, 0);
  }

  void on_attention(const AttentionObservation& obs) override {
    KVZIP_ASSERT(obs.layer < shape_.n_layers && obs.Hkv == shape_.n_kv_heads);
    const uint32_t p0 = obs.positions[0];
    advance_prefill(seen_, obs, total_);
    const uint32_t t0 = first_query_ > p0 ? first_query_ - p0 : 0;
    if (t0 >= obs.T) return;
    std::vector<KeyAxis> axes(obs.Hkv);
    for (uint32_t h = 0; h < obs.Hkv; ++h) {
      const KvHeadView v = obs.cache->view(obs.layer, h);
      KVZIP_ASSERT(v.len == p0 + obs.T);  // dense: row == position
      axes[h].ranges[0] = KeyRange{v.k, v.len};
      axes[h].n_ranges = 1;
      axes[h].causal_base = v.len - obs.T;
    }
    AttnStatsArgs a;
    a.q = obs.q;
    a.T = obs.T;
    a.Hq = obs.Hq;
    a.Hkv = obs.Hkv;
    a.D = obs.D;
    a.scale = obs.scale;
    a.t0 = t0;
    a.t1 = obs.T;
    a.axes = axes.data();
    a.col0 = 0;
    a.col1 = p0 + obs.T;
    a.reduce = Reduce::Sum;
    a.out = acc_.data() + size_t(obs.layer) * obs.Hkv * total_;
    a.out_stride = total_;
    attention_stats(pool_, a);
  }

  // Throws unless every layer observed the whole prefill.
  void check_complete(const char* method) const {
    for (uint32_t l = 0; l < shape_.n_layers; ++l)
      if (seen_.empty() || seen_[l] != total_)
        throw Error(Errc::invalid_argument,
                    std::string(method) + " scores from the prefill's attention: run the document "
                    "prefill with the scorer's prefill_observer() (layer " + std::to_string(l) +
                    " observed " + std::to_string(seen_.empty() ? 0 : seen_[l]) + " of " +
                    std::to_string(total_) + " tokens)");
  }
  const float* acc_row(uint32_t l, uint32_t h) const {
    return acc_.data() + (size_t(l) * shape_.n_kv_heads + h) * total_;
  }

 private:
  CacheShape shape_;
  uint32_t total_ = 0, first_query_ = 0;
  ThreadPool* pool_ = nullptr;
  std::vector<float> acc_;      // (L, Hkv, total)
  std::vector<uint32_t> seen_;  // (L) positions observed so far
};

// Base of the two observing scorers: prefill_observer() arms a fresh accumulator.
class ObservingScorer : public Scorer {
 public:
  AttentionObserver* prefill_observer(Forward& forward, uint32_t n_prefix,
                                      uint32_t n_doc) override {
    n_prefix_ = n_prefix;
    n_doc_ = n_doc;
    armed_ = true;
    obs_.reset(cache_shape(forward.config()), n_prefix + n_doc, first_query(n_prefix, n_doc),
               &forward.pool());
    return &obs_;
  }

 protected:
  virtual uint32_t first_query(uint32_t n_prefix, uint32_t n_doc) const = 0;
  // Checks that the observed prefill is the input's and returns its accumulator.
  const AccumulatingObserver& observed(const ScoreInput& in, const char* method) const {
    check_score_input(in, method);
    if (!armed_ || n_prefix_ != in.n_prefix || n_doc_ != in.document.size())
      throw Error(Errc::invalid_argument,
                  std::string(method) + " scores from the prefill's attention: call "
                  "prefill_observer(forward, n_prefix, n_doc) and run the document prefill with "
                  "it first");
    obs_.check_complete(method);
    return obs_;
  }

 private:
  AccumulatingObserver obs_;
  uint32_t n_prefix_ = 0, n_doc_ = 0;
  bool armed_ = false;
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
  if (o.snapkv_window == 0)
    throw Error(Errc::invalid_argument, "snapkv window is 0, expected >= 1 (default 32)");
  if (o.snapkv_kernel == 0 || o.snapkv_kernel % 2 == 0)
    throw Error(Errc::invalid_argument, "snapkv pooling kernel is " +
                                            std::to_string(o.snapkv_kernel) +
                                            ", expected an odd number >= 1 (default 7)");
  return std::make_unique<SnapKvScorer>(o.snapkv_window, o.snapkv_kernel);
}

std::unique_ptr<Scorer> make_h2o_scorer(const ScorerOptions& o) {
  return std::make_unique<H2oScorer>(o.h2o_recent);
}

}  // namespace kvzip::detail
