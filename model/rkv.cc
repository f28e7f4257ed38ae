// R-KV (model/rkv.h): the score of one head (the two terms are kernels/rkv.h) and its keep list,
// and RkvPolicy: the query ring buffer fed by the forward pass's observer, the compression
// schedule (every `buffer` decoded tokens, plus once after a prefill that left more than `budget`
// candidates) and the per-head in-place compaction through RaggedKvCache::retain. The first
// candidate row of a head is found by position (rows are in increasing position), so the policy
// holds no row indices across forward calls.
#include "model/rkv.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

#include "common/error.h"
#include "kernels/rkv.h"

namespace kvzip::model {
namespace {

[[noreturn]] void bad(const std::string& what) {
  throw Error(Errc::invalid_argument, "R-KV: " + what);
}

// Index of the first row of `v` at position >= pos.
uint32_t first_row_at(const KvHeadView& v, uint32_t pos) {
  return static_cast<uint32_t>(std::lower_bound(v.positions, v.positions + v.len, pos) -
                               v.positions);
}

}  // namespace

std::vector<float> rkv_scores(const RkvHeadInput& in, const RkvParams& p) {
  KVZIP_ASSERT(in.keys && in.queries && in.D > 0 && in.G > 0 && in.A > 0 && in.N > p.window);
  const uint32_t M = in.N - p.window;
  std::vector<float> z(M), red(in.N);
  const uint64_t stride = in.q_stride ? in.q_stride : uint64_t(in.G) * in.D;
  rkv_importance(kernels::Exec{}, kernels::RkvImportanceArgs{.q = in.queries,
                                                             .tokens = in.A,
                                                             .q_stride = stride,
                                                             .G = in.G,
                                                             .D = in.D,
                                                             .scale = in.scale,
                                                             .k = in.keys,
                                                             .n = M,
                                                             .kernel = p.kernel,
                                                             .out = z.data()});
  rkv_redundancy(kernels::Exec{},
                 kernels::RkvRedundancyArgs{in.keys, in.N, in.D, p.threshold, red.data()});
  for (uint32_t j = 0; j < M; ++j) z[j] = p.lambda * z[j] - (1.0f - p.lambda) * red[j];
  return z;
}

std::vector<uint32_t> rkv_keep(std::span<const float> scores, uint32_t N, const RkvParams& p) {
  KVZIP_ASSERT(N > p.budget && p.budget > p.window && scores.size() == N - p.window);
  std::vector<uint32_t> idx(scores.size());
  std::iota(idx.begin(), idx.end(), 0u);
  const size_t top = p.budget - p.window;
  auto better = [&](uint32_t a, uint32_t b) {
    return scores[a] != scores[b] ? scores[a] > scores[b] : a > b;
  };
  std::nth_element(idx.begin(), idx.begin() + (top - 1), idx.end(), better);
  idx.resize(top);
  std::sort(idx.begin(), idx.end());
  for (uint32_t j = N - p.window; j < N; ++j) idx.push_back(j);
  return idx;
}

void validate(const RkvParams& p) {
  if (p.buffer == 0)
    bad("buffer is 0; give the number of generated tokens between compressions (e.g. 128)");
  if (p.learned && p.streaming) bad("a learned score and the streaming policy exclude each other");
  if (p.learned && p.doc_candidates)
    bad("a learned score ranks generated rows only (the document's rows were chosen when the "
        "cache was compressed)");
  if (p.streaming) {
    if (p.budget <= p.sink)
      bad("budget " + std::to_string(p.budget) + " must exceed the " + std::to_string(p.sink) +
          " sink tokens of the streaming policy");
    return;
  }
  if (p.window == 0) bad("window is 0; at least the newest token must stay (default 8)");
  if (p.budget < p.window + 1)
    bad("budget " + std::to_string(p.budget) +
        " must be at least window + 1 = " + std::to_string(p.window + 1) + " rows");
  if (!(p.lambda >= 0.0f && p.lambda <= 1.0f))
    bad("lambda " + std::to_string(p.lambda) + " is outside [0, 1]");
  if (!(p.threshold >= -1.0f && p.threshold <= 1.0f))
    bad("similarity threshold " + std::to_string(p.threshold) + " is outside [-1, 1]");
  if (p.kernel == 0 || p.kernel % 2 == 0)
    bad("max-pool kernel " + std::to_string(p.kernel) + " must be odd (centred), e.g. 7");
}

RkvPolicy::RkvPolicy(const RkvParams& p, const ModelConfig& cfg)
    : p_(p), L_(cfg.n_layers), Hq_(cfg.n_heads), Hkv_(cfg.n_kv_heads), D_(cfg.head_dim) {
  validate(p);
  KVZIP_ASSERT(L_ > 0 && Hkv_ > 0 && Hq_ % Hkv_ == 0 && D_ > 0);
  const uint32_t a = std::max<uint32_t>(p.window, 1);
  ring_.assign(size_t(L_) * a * Hq_ * D_, 0.0f);
  ring_next_.assign(L_, 0);
  ring_count_.assign(L_, 0);
  if (p.learned && (p.learned_dim != cfg.d_model ||
                    p.learned->size() != size_t(L_) * Hkv_ * (size_t(cfg.d_model) + 1)))
    throw Error(Errc::model_mismatch,
                "R-KV: the learned scorer has " + std::to_string(p.learned->size()) +
                    " coefficients of E = " + std::to_string(p.learned_dim) + ", the model needs " +
                    std::to_string(size_t(L_) * Hkv_ * (size_t(cfg.d_model) + 1)) +
                    " of E = " + std::to_string(cfg.d_model));
  learned_scores_.resize(L_);
}

void RkvPolicy::begin(uint32_t first_position) {
  first_position_ = first_position;
  since_ = 0;
  std::fill(ring_next_.begin(), ring_next_.end(), 0u);
  std::fill(ring_count_.begin(), ring_count_.end(), 0u);
  for (std::vector<float>& s : learned_scores_) s.clear();
}

void RkvPolicy::score_learned(const AttentionObservation& obs) {
  const uint32_t E = p_.learned_dim, l = obs.layer;
  KVZIP_ASSERT(obs.x_norm && obs.E == E);
  std::vector<float>& out = learned_scores_[l];
  for (uint32_t t = 0; t < obs.T; ++t) {
    if (obs.positions[t] < first_position_) continue;
    const size_t at = size_t(obs.positions[t] - first_position_) * Hkv_;
    if (out.size() < at + Hkv_) out.resize(at + Hkv_);
    const float* x = obs.x_norm + size_t(t) * E;
    for (uint32_t h = 0; h < Hkv_; ++h) {  // the kvzap prediction, fp32 in a fixed order
      const float* w = p_.learned->data() + (size_t(l) * Hkv_ + h) * (size_t(E) + 1);
      float acc = 0.0f;
      for (uint32_t e = 0; e < E; ++e) acc += w[e] * x[e];
      out[at + h] = acc + w[E];
    }
  }
}

void RkvPolicy::on_attention(const AttentionObservation& obs) {
  if (p_.learned) return score_learned(obs);
  if (p_.streaming) return;  // recency needs no queries
  KVZIP_ASSERT(obs.layer < L_ && obs.Hq == Hq_ && obs.D == D_);
  const uint32_t a = p_.window, row = Hq_ * D_;
  for (uint32_t t = obs.T > a ? obs.T - a : 0; t < obs.T; ++t) {
    const uint32_t l = obs.layer;
    float* dst = ring_.data() + (size_t(l) * a + ring_next_[l]) * row;
    std::memcpy(dst, obs.q + size_t(t) * row, size_t(row) * sizeof(float));
    ring_next_[l] = (ring_next_[l] + 1) % a;
    ring_count_[l] = std::min(ring_count_[l] + 1, a);
  }
}

std::vector<uint32_t> RkvPolicy::choose(const KvHeadView& v, uint32_t first, uint32_t layer,
                                        uint32_t kv_head) const {
  const uint32_t N = v.len - first;
  std::vector<uint32_t> keep;
  if (p_.streaming) {
    for (uint32_t j = 0; j < p_.sink; ++j) keep.push_back(j);
    for (uint32_t j = N - (p_.budget - p_.sink); j < N; ++j) keep.push_back(j);
    return keep;
  }
  if (p_.learned) {  // the scored rows' predictions, then rkv_keep's rule
    const std::vector<float>& s = learned_scores_[layer];
    std::vector<float> scores(N - p_.window);
    for (uint32_t j = 0; j < N - p_.window; ++j) {
      const size_t at = size_t(v.positions[first + j] - first_position_) * Hkv_ + kv_head;
      if (at >= s.size())
        throw Error(Errc::internal,
                    "R-KV: a candidate row was never observed, so it has no "
                    "learned score");
      scores[j] = s[at];
    }
    return rkv_keep(scores, N, p_);
  }
  const uint32_t a = p_.window, A = ring_count_[layer], G = Hq_ / Hkv_;
  KVZIP_ASSERT(A > 0);
  std::vector<float> q(size_t(A) * G * D_);  // (A, G, D) oldest first
  for (uint32_t t = 0; t < A; ++t) {
    const uint32_t slot = (ring_next_[layer] + a - A + t) % a;
    const float* src = ring_.data() + ((size_t(layer) * a + slot) * Hq_ + size_t(kv_head) * G) * D_;
    std::memcpy(q.data() + size_t(t) * G * D_, src, size_t(G) * D_ * sizeof(float));
  }
  RkvHeadInput in;
  in.keys = v.k + size_t(first) * D_;
  in.N = N;
  in.queries = q.data();
  in.A = A;
  in.G = G;
  in.D = D_;
  in.scale = 1.0f / std::sqrt(float(D_));
  return rkv_keep(rkv_scores(in, p_), N, p_);
}

void RkvPolicy::compress(RaggedKvCache& cache) {
  bool any = false;
  std::vector<uint32_t> rows;
  for (uint32_t l = 0; l < L_; ++l)
    for (uint32_t h = 0; h < Hkv_; ++h) {
      const KvHeadView v = cache.view(l, h);
      const uint32_t first = first_row_at(v, first_position_), N = v.len - first;
      if (N <= p_.budget) continue;
      const std::vector<uint32_t> keep = choose(v, first, l, h);
      rows.resize(first);
      for (uint32_t r = 0; r < first; ++r) rows[r] = r;
      for (uint32_t j : keep) rows.push_back(first + j);
      cache.retain(l, h, rows);
      evicted_ += N - keep.size();
      any = true;
    }
  if (any) ++compressions_;
}

void RkvPolicy::check_bound(const RaggedKvCache& cache) const {
  for (uint32_t l = 0; l < L_; ++l)
    for (uint32_t h = 0; h < Hkv_; ++h) {
      const KvHeadView v = cache.view(l, h);
      const uint32_t n = v.len - first_row_at(v, first_position_);
      if (n > p_.budget + p_.buffer)
        throw Error(Errc::internal, "R-KV: layer " + std::to_string(l) + " head " +
                                        std::to_string(h) + " holds " + std::to_string(n) +
                                        " candidate rows, over budget + buffer = " +
                                        std::to_string(p_.budget + p_.buffer));
    }
}

void RkvPolicy::after_prefill(RaggedKvCache& cache) {
  compress(cache);
  check_bound(cache);
}

void RkvPolicy::after_decode(RaggedKvCache& cache) {
  if (++since_ >= p_.buffer) {
    since_ = 0;
    compress(cache);
  }
  check_bound(cache);
}

}  // namespace kvzip::model
