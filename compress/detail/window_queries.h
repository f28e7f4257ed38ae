// Records the post-RoPE queries of the document's last W tokens during its prefill, for scorers
// that score from a probe window after the prefill (ReST-KV, offline R-KV): everything else they
// need (keys, values) is in the dense cache afterwards. Memory: L·W·Hq·D floats. The observer
// checks that it sees one prefill of [prefix ; document] in order, layer by layer.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "compress/detail/scorers.h"
#include "compress/scorer.h"

namespace kvzip::compress::detail {

class WindowQueries final : public model::AttentionObserver {
 public:
  // Queries of the last `window` positions of the prefill of [n_prefix ; n_doc] tokens.
  void reset(const ModelConfig& cfg, uint32_t n_prefix, uint32_t n_doc, uint32_t window);
  void on_attention(const model::AttentionObservation& obs) override;
  // The recorder, once the watch confirms that `in` is the observed, complete prefill (else
  // Errc::invalid_argument).
  const WindowQueries& checked(const ScoreInput& in, const char* method) const;

  uint32_t window() const { return window_; }
  // (window, Hq, D): query token t of the window (position total - window + t) of `layer`.
  const float* layer_queries(uint32_t layer) const {
    return q_.data() + size_t(layer) * window_ * Hq_ * D_;
  }

 private:
  uint32_t L_ = 0, Hq_ = 0, D_ = 0, window_ = 0;
  PrefillWatch watch_;
  std::vector<float> q_;  // (L, window, Hq, D)
};

// Base of the scorers that probe with the document's last `window` queries: prefill_observer()
// arms a fresh recorder; observed() checks that the prefill it saw is the input's.
class WindowScorer : public Scorer {
 public:
  model::AttentionObserver* prefill_observer(model::Forward& forward, uint32_t n_prefix,
                                             uint32_t n_doc) override;

 protected:
  explicit WindowScorer(uint32_t window) : window_(window) {}
  const WindowQueries& observed(const ScoreInput& in, const char* method) const {
    return rec_.checked(in, method);
  }
  uint32_t window_;  // W as configured; the probe is min(W, n_doc) tokens

 private:
  WindowQueries rec_;
};

// Runs fn(u) for u in [0, n) on the pool with OpenBLAS single-threaded inside the tasks (one
// sgemm per thread), restoring its thread count afterwards, also when a task throws.
void run_units(kernels::ThreadPool& pool, size_t n, const std::function<void(size_t)>& fn);

}  // namespace kvzip::compress::detail
