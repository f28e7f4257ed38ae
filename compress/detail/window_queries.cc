// WindowQueries, WindowScorer and run_units (see window_queries.h). The observer copies each
// layer's window rows out of the chunks that contain them; a window spanning two prefill chunks
// arrives in two calls per layer.
#include "compress/detail/window_queries.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/error.h"
#include "compress/detail/scorers.h"
#include "kernels/gemm.h"
#include "kernels/simd.h"
#include "kernels/thread_pool.h"

namespace kvzip::detail {

void WindowQueries::reset(const ModelConfig& cfg, uint32_t total, uint32_t window) {
  L_ = cfg.n_layers;
  Hq_ = cfg.n_heads;
  D_ = cfg.head_dim;
  total_ = total;
  window_ = std::min(window, total);
  q_.assign(size_t(L_) * window_ * Hq_ * D_, 0.0f);
  seen_.assign(L_, 0);
}

void WindowQueries::on_attention(const AttentionObservation& obs) {
  KVZIP_ASSERT(obs.layer < L_ && obs.Hq == Hq_ && obs.D == D_);
  const uint32_t p0 = obs.positions[0];
  advance_prefill(seen_, obs, total_);
  const uint32_t first = total_ - window_;  // position of window row 0
  const size_t row = size_t(Hq_) * D_;
  for (uint32_t p = std::max(first, p0); p < p0 + obs.T; ++p)
    std::memcpy(q_.data() + (size_t(obs.layer) * window_ + (p - first)) * row,
                obs.q + size_t(p - p0) * row, row * sizeof(float));
}

void WindowQueries::check_complete(const char* method) const {
  for (uint32_t l = 0; l < L_; ++l)
    if (seen_[l] != total_)
      throw Error(Errc::invalid_argument,
                  std::string(method) + " probes with the document's last queries: run the "
                  "document prefill with the scorer's prefill_observer() (layer " +
                      std::to_string(l) + " observed " + std::to_string(seen_[l]) + " of " +
                      std::to_string(total_) + " tokens)");
}

AttentionObserver* WindowScorer::prefill_observer(Forward& forward, uint32_t n_prefix,
                                                  uint32_t n_doc) {
  n_prefix_ = n_prefix;
  n_doc_ = n_doc;
  armed_ = true;
  // The probe never reaches into the prefix: min(W, n_doc) document tokens.
  rec_.reset(forward.config(), n_prefix + n_doc, std::min(window_, n_doc));
  return &rec_;
}

const WindowQueries& WindowScorer::observed(const ScoreInput& in, const char* method) const {
  check_score_input(in, method);
  if (!armed_ || n_prefix_ != in.n_prefix || n_doc_ != in.document.size())
    throw Error(Errc::invalid_argument,
                std::string(method) + " probes with the document's last queries: call "
                "prefill_observer(forward, n_prefix, n_doc) and run the document prefill with it "
                "first");
  rec_.check_complete(method);
  return rec_;
}

void run_units(ThreadPool& pool, size_t n, const std::function<void(size_t)>& fn) {
  if (n <= 1 || pool.size() == 1) {
    for (size_t u = 0; u < n; ++u) fn(u);
    return;
  }
  set_blas_threads(1);  // one sgemm per thread: no nested BLAS threads
  try {
    pool.run(n, fn);
  } catch (...) {
    set_blas_threads(pool.size());
    throw;
  }
  set_blas_threads(pool.size());
}

void softmax_inplace(float* x, uint32_t n) {
  using simd::kLanes;
  using simd::VecF;
  VecF mv = simd::splat(-3.0e38f);
  uint32_t i = 0;
  for (; i + kLanes <= n; i += kLanes) mv = simd::vmax(mv, simd::load(x + i));
  float m = simd::hmax(mv);
  for (; i < n; ++i) m = std::max(m, x[i]);
  const VecF ms = simd::splat(m);
  VecF sv{};
  for (i = 0; i + kLanes <= n; i += kLanes) {
    const VecF e = simd::exp_vec(simd::load(x + i) - ms);
    simd::store(x + i, e);
    sv += e;
  }
  float sum = simd::hsum(sv);
  for (; i < n; ++i) sum += (x[i] = simd::exp_scalar(x[i] - m));
  const float inv = 1.0f / sum;
  for (i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace kvzip::detail
