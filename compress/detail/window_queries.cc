// WindowQueries, WindowScorer and run_units (see window_queries.h). The observer copies each
// layer's window rows out of the chunks that contain them; a window spanning two prefill chunks
// arrives in two calls per layer.
#include "compress/detail/window_queries.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/error.h"
#include "kernels/gemm.h"
#include "kernels/thread_pool.h"

namespace kvzip::compress::detail {

void WindowQueries::reset(const ModelConfig& cfg, uint32_t n_prefix, uint32_t n_doc,
                          uint32_t window) {
  L_ = cfg.n_layers;
  Hq_ = cfg.n_heads;
  D_ = cfg.head_dim;
  watch_.arm(L_, n_prefix, n_doc);
  window_ = std::min(window, watch_.total());
  q_.assign(size_t(L_) * window_ * Hq_ * D_, 0.0f);
}

void WindowQueries::on_attention(const model::AttentionObservation& obs) {
  KVZIP_ASSERT(obs.layer < L_ && obs.Hq == Hq_ && obs.D == D_);
  const uint32_t p0 = obs.positions[0];
  watch_.advance(obs);
  const uint32_t first = watch_.total() - window_;  // position of window row 0
  const size_t row = size_t(Hq_) * D_;
  for (uint32_t p = std::max(first, p0); p < p0 + obs.T; ++p)
    std::memcpy(q_.data() + (size_t(obs.layer) * window_ + (p - first)) * row,
                obs.q + size_t(p - p0) * row, row * sizeof(float));
}

const WindowQueries& WindowQueries::checked(const ScoreInput& in, const char* method) const {
  watch_.check(in, method, "probes with the document's last queries");
  return *this;
}

model::AttentionObserver* WindowScorer::prefill_observer(model::Forward& forward, uint32_t n_prefix,
                                                         uint32_t n_doc) {
  // The probe never reaches into the prefix: min(W, n_doc) document tokens.
  rec_.reset(forward.config(), n_prefix, n_doc, std::min(window_, n_doc));
  return &rec_;
}

void run_units(kernels::ThreadPool& pool, size_t n, const std::function<void(size_t)>& fn) {
  if (n <= 1 || pool.size() == 1) {
    for (size_t u = 0; u < n; ++u) fn(u);
    return;
  }
  kernels::set_blas_threads(1);  // one sgemm per thread: no nested BLAS threads
  try {
    pool.run(n, fn);
  } catch (...) {
    kernels::set_blas_threads(pool.size());
    throw;
  }
  kernels::set_blas_threads(pool.size());
}

}  // namespace kvzip::compress::detail
