// The learned scorer's pieces that need no training run (compress/learned_scorer.h): the ridge
// normal equations and their Cholesky solve, the fit-quality measures, the predictor, and the
// "kvzap" scorer that applies a .kvp during the document's prefill.
#include "compress/learned_scorer.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <numeric>

#include "common/error.h"
#include "compress/detail/scorers.h"

extern "C" void dposv_(const char* uplo, const int* n, const int* nrhs, double* a, const int* lda,
                       double* b, const int* ldb, int* info);

namespace kvzip::compress {

// ---- Ridge --------------------------------------------------------------------------------------

RidgeSystem::RidgeSystem(uint32_t dim, uint32_t outputs)
    : dim_(dim),
      outputs_(outputs),
      xtx_(size_t(dim + 1) * (dim + 1), 0.0),
      xty_(size_t(outputs) * (dim + 1), 0.0) {
  if (dim == 0 || outputs == 0)
    throw Error(Errc::invalid_argument, "ridge: needs at least one feature and one output");
}

void RidgeSystem::add(const float* x, size_t x_stride, const float* y, uint32_t n) {
  if (n == 0) return;
  const size_t d1 = size_t(dim_) + 1;
  buf_.resize(size_t(n) * d1);
  std::vector<double> yd(size_t(n) * outputs_);
  for (uint32_t i = 0; i < n; ++i) {
    const float* xi = x + i * x_stride;
    double* row = buf_.data() + i * d1;
    for (uint32_t e = 0; e < dim_; ++e) row[e] = xi[e];
    row[dim_] = 1.0;  // the intercept's feature
    for (uint32_t o = 0; o < outputs_; ++o)
      yd[size_t(i) * outputs_ + o] = y[size_t(i) * outputs_ + o];
  }
  // Column-major, buf_ is A = (d1, n), one column per row: XᵀX += A·Aᵀ, Xᵀy += A·Yᵀ.
  cblas_dsyrk(CblasColMajor, CblasUpper, CblasNoTrans, int(d1), int(n), 1.0, buf_.data(), int(d1),
              1.0, xtx_.data(), int(d1));
  cblas_dgemm(CblasColMajor, CblasNoTrans, CblasTrans, int(d1), int(outputs_), int(n), 1.0,
              buf_.data(), int(d1), yd.data(), int(outputs_), 1.0, xty_.data(), int(d1));
  rows_ += n;
}

std::vector<double> RidgeSystem::solve(double alpha) const {
  if (rows_ == 0) throw Error(Errc::invalid_argument, "ridge: no rows to fit");
  const int d1 = int(dim_) + 1, nrhs = int(outputs_);
  std::vector<double> a = xtx_, b = xty_;
  for (uint32_t e = 0; e < dim_; ++e) a[size_t(e) * d1 + e] += alpha;
  int info = 0;
  dposv_("U", &d1, &nrhs, a.data(), &d1, b.data(), &d1, &info);
  if (info != 0)
    throw Error(Errc::invalid_argument,
                "ridge: the normal equations are not positive definite (LAPACK dposv info " +
                    std::to_string(info) + " over " + std::to_string(rows_) +
                    " rows); use more calibration text or a larger alpha");
  return b;
}

// ---- Fit quality --------------------------------------------------------------------------------

double r_squared(std::span<const float> t, std::span<const float> p) {
  KVZIP_ASSERT(t.size() == p.size());
  if (t.size() < 2) return std::numeric_limits<double>::quiet_NaN();
  double mean = 0;
  for (float v : t) mean += v;
  mean /= double(t.size());
  double res = 0, tot = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    res += (double(t[i]) - p[i]) * (double(t[i]) - p[i]);
    tot += (double(t[i]) - mean) * (double(t[i]) - mean);
  }
  return tot > 0 ? 1.0 - res / tot : std::numeric_limits<double>::quiet_NaN();
}

namespace {

// Ranks 1..n, ties sharing their average rank.
std::vector<double> ranks(std::span<const float> v) {
  std::vector<uint32_t> order(v.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return v[a] < v[b]; });
  std::vector<double> r(v.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && v[order[j + 1]] == v[order[i]]) ++j;
    const double avg = 0.5 * double(i + j) + 1.0;
    for (size_t k = i; k <= j; ++k) r[order[k]] = avg;
    i = j + 1;
  }
  return r;
}

}  // namespace

double spearman(std::span<const float> a, std::span<const float> b) {
  KVZIP_ASSERT(a.size() == b.size());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (a.size() < 2) return nan;
  const std::vector<double> ra = ranks(a), rb = ranks(b);
  const double mean = 0.5 * double(a.size() + 1);
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    sab += (ra[i] - mean) * (rb[i] - mean);
    saa += (ra[i] - mean) * (ra[i] - mean);
    sbb += (rb[i] - mean) * (rb[i] - mean);
  }
  return saa > 0 && sbb > 0 ? sab / std::sqrt(saa * sbb) : nan;
}

// ---- Prediction ---------------------------------------------------------------------------------

void predict_layer(const format::ScorerFile& s, uint32_t layer, const float* x, uint32_t n,
                   float* out, size_t out_stride) {
  const uint32_t E = s.d_model;
  for (uint32_t h = 0; h < s.n_kv_heads; ++h) {
    const float* w = s.coefficients(layer, h);
    for (uint32_t j = 0; j < n; ++j) {
      const float* xj = x + size_t(j) * E;
      float acc = 0.0f;
      for (uint32_t e = 0; e < E; ++e) acc += w[e] * xj[e];
      out[h * out_stride + j] = acc + w[E];
    }
  }
}

void check_scorer_shape(const format::ScorerFile& s, const ModelConfig& c) {
  if (c.n_layers == s.n_layers && c.n_kv_heads == s.n_kv_heads && c.d_model == s.d_model) return;
  throw Error(Errc::model_mismatch,
              "kvzap: the scorer file is for L = " + std::to_string(s.n_layers) +
                  ", Hkv = " + std::to_string(s.n_kv_heads) + ", E = " + std::to_string(s.d_model) +
                  ", the model has L = " + std::to_string(c.n_layers) +
                  ", Hkv = " + std::to_string(c.n_kv_heads) + ", E = " + std::to_string(c.d_model));
}

// ---- The "kvzap" scorer -------------------------------------------------------------------------

namespace {

// Predicts each document row's scores from its input-normed hidden state as the prefill's layer
// reaches it; the scores are written straight into the DocumentScores that score() returns.
class LearnedObserver final : public model::AttentionObserver {
 public:
  LearnedObserver(const format::ScorerFile& s, DocumentScores& out) : s_(s), out_(out) {}
  detail::PrefillWatch& watch() { return watch_; }
  void on_attention(const model::AttentionObservation& obs) override {
    watch_.advance(obs);
    if (out_.is_local(obs.layer)) return;  // selection keeps a local layer's reachable rows
    KVZIP_ASSERT(obs.x_norm && obs.E == s_.d_model);
    const uint32_t n_p = out_.n_prefix;
    uint32_t t0 = 0;  // first document row of the chunk (positions increase)
    while (t0 < obs.T && obs.positions[t0] < n_p) ++t0;
    if (t0 == obs.T) return;
    const uint32_t j0 = obs.positions[t0] - n_p;
    float* out = out_.values.data() + size_t(obs.layer) * s_.n_kv_heads * out_.n_doc + j0;
    predict_layer(s_, obs.layer, obs.x_norm + size_t(t0) * obs.E, obs.T - t0, out, out_.n_doc);
  }

 private:
  const format::ScorerFile& s_;
  DocumentScores& out_;
  detail::PrefillWatch watch_;
};

class LearnedScorer final : public Scorer {
 public:
  LearnedScorer(std::shared_ptr<const format::ScorerFile> s, MethodParams source, uint32_t window)
      : s_(std::move(s)), source_(std::move(source)), window_(window) {}
  std::string name() const override { return kLearnedMethod; }
  MethodParams params() const override {
    MethodParams p = source_;
    p.emplace_back("predictor", "ridge per layer from the input-normed hidden state");
    p.emplace_back("window", std::to_string(window_));
    return p;
  }
  model::AttentionObserver* prefill_observer(model::Forward& forward, uint32_t n_prefix,
                                             uint32_t n_doc) override {
    const ModelConfig& c = forward.config();
    check_scorer_shape(*s_, c);
    scores_ = DocumentScores{model::cache_shape(c), n_prefix, n_doc, {}, {}, 0};
    scores_.values.assign(size_t(c.n_layers) * c.n_kv_heads * n_doc, 0.0f);
    if (c.hybrid()) {
      scores_.local_layers.resize(c.n_layers);
      for (uint32_t l = 0; l < c.n_layers; ++l) scores_.local_layers[l] = c.is_local(l);
      scores_.window = c.sliding_window;
    }
    observer_ = std::make_unique<LearnedObserver>(*s_, scores_);
    observer_->watch().arm(c.n_layers, n_prefix, n_doc);
    return observer_.get();
  }
  DocumentScores score(const ScoreInput& in) override {
    if (!observer_)
      throw Error(Errc::invalid_argument,
                  "kvzap scores during the prefill: attach "
                  "prefill_observer() to the document's prefill first");
    observer_->watch().check(in, "kvzap", "the prefill's hidden states");
    DocumentScores out = scores_;
    const uint32_t n = out.n_doc, w = std::min(window_, n);
    for (uint32_t l = 0; l < out.shape.n_layers; ++l) {
      if (out.is_local(l)) continue;
      for (uint32_t h = 0; h < out.shape.n_kv_heads; ++h)
        std::fill_n(out.values.data() + (size_t(l) * out.shape.n_kv_heads + h) * n + (n - w), w,
                    std::numeric_limits<float>::infinity());
    }
    return out;
  }

 private:
  std::shared_ptr<const format::ScorerFile> s_;
  MethodParams source_;
  uint32_t window_;
  DocumentScores scores_;
  std::unique_ptr<LearnedObserver> observer_;
};

}  // namespace

std::unique_ptr<Scorer> make_learned_scorer(std::shared_ptr<const format::ScorerFile> scorer,
                                            MethodParams source, uint32_t window) {
  if (!scorer)
    throw Error(Errc::invalid_argument,
                "method kvzap needs option scorer, a .kvp file made by the scorer calibration on a "
                "text other than the documents");
  return std::make_unique<LearnedScorer>(std::move(scorer), std::move(source), window);
}

MethodParams learned_scorer_source(const format::ScorerFile& s, const std::string& file_name) {
  return {{"scorer", std::filesystem::path(file_name).filename().string()},
          {"scorer_xxh64", format::scorer_checksum_text(s)},
          {"scorer_target", format::scorer_target_name(s.target)}};
}

}  // namespace kvzip::compress
