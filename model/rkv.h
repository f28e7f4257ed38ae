// Bounded caches during generation: R-KV (spec/methods.md §4; Cai et al., "R-KV: Redundancy-aware
// KV cache compression for reasoning models", 2025: Z = λ·I − (1 − λ)·R) and, on the same schedule,
// the StreamingLLM baseline (sink + most recent). A policy works on a RaggedKvCache per (layer,
// KV head). Candidate rows are a suffix of every head: rows at positions >= first_position; the
// rows before them (prompt, document and question by default, only the prefix with doc candidates)
// are never evicted. Invariant (checked after every step, Errc::internal if broken): a head never
// holds more than budget + buffer candidate rows, so rows <= base rows + budget + buffer (that
// many only in the decode step right before a compression; budget right after one).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "cache/ragged_cache.h"
#include "common/model_config.h"
#include "model/forward.h"

namespace kvzip::model {

struct RkvParams {
  uint32_t budget = 0;     // B_budget: candidate rows per head kept by each compression
  uint32_t buffer = 128;   // B_buffer: generated tokens between compressions
  uint32_t window = 8;     // α: most recent tokens always kept; also the queries remembered
  float lambda = 0.1f;     // λ: weight of importance against redundancy
  float threshold = 0.5f;  // T: cosine similarity above which a token is a copy
  uint32_t kernel = 7;     // centred max-pool width over importance (odd)
  // false: only generated rows are candidates. true: every row at position >= pinned is (the
  // document, the question, the answer); the compressed base is then changed by the first
  // compression, so its owner must keep a copy to restore (QuerySession::ask does).
  bool doc_candidates = false;
  uint32_t pinned = 0;  // with doc_candidates: rows at positions < pinned (the prefix) stay
  // StreamingLLM instead of R-KV: keep the first `sink` candidates plus the most recent ones.
  bool streaming = false;
  uint32_t sink = 4;
  // A learned score instead of R-KV's (kvzap, compress/learned_scorer.h): each candidate row's
  // predicted log KVzip score from its own input-normed hidden state, computed once when the row
  // is made; a compression keeps the budget - window best plus the last `window`. (L, Hkv, E + 1)
  // coefficients then intercept per (layer, KV head), E = learned_dim. Generated candidates only.
  std::shared_ptr<const std::vector<float>> learned;
  uint32_t learned_dim = 0;
};

// Throws Errc::invalid_argument naming the first bad field (budget < window + 1, buffer 0,
// lambda outside [0, 1], even kernel, streaming with budget <= sink, a learned score with
// streaming or doc candidates, ...).
void validate(const RkvParams& p);

// One KV head's input to the R-KV score (both the decode-time policy below and the offline
// scorer of compress/ call rkv_scores; the two terms are the kernels of kernels/rkv.h).
struct RkvHeadInput {
  const float* keys = nullptr;  // (N, D) post-RoPE keys of the candidates, oldest first; the
                                // last `window` of them are the protected window
  uint32_t N = 0;
  const float* queries = nullptr;  // the last A post-RoPE queries of the G query heads that read
                                   // this KV head, oldest first: token t, head g at
                                   // queries + t·q_stride + g·D
  uint32_t A = 0;
  uint32_t G = 0;
  uint32_t D = 0;
  float scale = 0.0f;     // attention logit scale, 1/sqrt(D)
  uint64_t q_stride = 0;  // floats between query tokens; 0 = G·D (contiguous (A, G, D))
};

// Z_j = λ·I_j − (1 − λ)·R_j over the scored rows [0, N − α) (spec/methods.md §4): importance from
// the A queries over the scored rows, redundancy over all N candidate rows (the window included),
// R restricted to the scored rows afterwards. Needs N > α and A >= 1. (N − α)
std::vector<float> rkv_scores(const RkvHeadInput& in, const RkvParams& p);
// Ascending candidate indices to keep (p.budget of them, N > p.budget): the budget − α highest
// scores (ties to the more recent row) plus the last α rows.
std::vector<uint32_t> rkv_keep(std::span<const float> scores, uint32_t N, const RkvParams& p);

// The policy generate() runs when GenerateParams::rkv is set. It observes every forward call to
// remember the last α queries of every query head per layer, and compacts the cache in place.
class RkvPolicy final : public AttentionObserver {
 public:
  // Validates p; cfg gives Hq, Hkv, D and L.
  RkvPolicy(const RkvParams& p, const ModelConfig& cfg);

  // Rows at positions >= first_position become candidates. Call before the first forward call.
  void begin(uint32_t first_position);
  void on_attention(const AttentionObservation& obs) override;
  // After the prompt's prefill: compresses heads holding more than budget candidates (only
  // possible with doc candidates), so the bound holds from the first decoded token on.
  void after_prefill(RaggedKvCache& cache);
  // After each decoded token: every `buffer` tokens, compresses every head holding more than
  // budget candidates down to budget. Throws Errc::internal if the bound is ever exceeded.
  void after_decode(RaggedKvCache& cache);

  uint64_t evicted() const { return evicted_; }            // rows removed, summed over (l, h)
  uint32_t compressions() const { return compressions_; }  // compress passes that evicted
  const RkvParams& params() const { return p_; }

 private:
  void compress(RaggedKvCache& cache);
  void score_learned(const AttentionObservation& obs);
  // Candidate indices (relative to the first candidate row) that head (l, h) keeps.
  std::vector<uint32_t> choose(const KvHeadView& v, uint32_t first, uint32_t layer,
                               uint32_t kv_head) const;
  void check_bound(const RaggedKvCache& cache) const;

  RkvParams p_;
  uint32_t L_, Hq_, Hkv_, D_;
  uint32_t first_position_ = 0;
  uint32_t since_ = 0;                // decoded tokens since the last scheduled check
  std::vector<float> ring_;           // (L, α, Hq, D) last queries per layer, circular
  std::vector<uint32_t> ring_next_;   // (L) slot the next query goes to
  std::vector<uint32_t> ring_count_;  // (L) queries held, <= α
  // With a learned score: (L) × (candidate position - first position, Hkv) predicted scores.
  std::vector<std::vector<float>> learned_scores_;
  uint64_t evicted_ = 0;
  uint32_t compressions_ = 0;
};

}  // namespace kvzip::model
