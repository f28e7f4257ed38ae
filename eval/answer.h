// Greedy answering for the evaluation, with draft verification (speculative decoding whose drafts
// are other answers to the same question). Without drafts this is exactly generate() (kvzip
// query's path: prefill the question, argmax, one decode per token). With drafts the question is
// prefilled the same way; whenever the answer so far is a prefix of a draft, the draft's next
// tokens are fed in a batched pass (8 at first, doubling while they are all taken) whose
// per-position argmaxes say how far the greedy answer follows it; after the first difference
// another draft may take over, else decoding goes on one token at a time. In exact arithmetic the
// result is the greedy answer whatever the drafts; in floating point a batched pass (fp32 GEMM)
// rounds differently from one-token decodes (GEMV, on the model file's quantized blocks by
// default), so a near-tie between the two best tokens can (rarely) resolve differently than in
// `kvzip query`. The cache is back at its state before the call afterwards, also when this throws.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "cache/kv_cache.h"
#include "model/forward.h"

namespace kvzip::eval {

struct GreedyAnswer {
  std::vector<int32_t> tokens;      // answer ids, stop token excluded
  bool stopped = false;             // ended on a stop token
  std::vector<float> first_logits;  // (V) the distribution that chose the first token
  uint32_t decode_steps = 0;        // one-token forward passes run (drafts save these)
  uint32_t draft_passes = 0;        // batched draft passes run
};

// Candidate answers to one question; the most recently added is tried first. Identical token
// sequences are stored once.
class DraftPool {
 public:
  void add(const std::vector<int32_t>& tokens);
  // The newest draft that starts with `prefix` and has at least `extra` more tokens, or nullptr.
  const std::vector<int32_t>* find(std::span<const int32_t> prefix, size_t extra) const;
  size_t size() const { return drafts_.size(); }

 private:
  std::vector<std::vector<int32_t>> drafts_;  // oldest first
};

struct AnswerParams {
  uint32_t max_tokens = 24;
  std::vector<int32_t> stop_tokens;  // as GenerateParams::stop_tokens
};

// Answers `prompt` (question tokens, already templated) greedily from `cache`. `drafts` may be
// null (plain greedy decoding, exactly generate()). Errors as generate() (empty prompt, context
// exceeded).
GreedyAnswer answer_greedy(model::Forward& forward, model::AttentionCache& cache,
                           std::span<const int32_t> prompt, const AnswerParams& params,
                           const DraftPool* drafts = nullptr);

}  // namespace kvzip::eval
