// Greedy answering for the evaluation, with draft verification. Without a draft this is exactly
// generate() (kvzip query's path: prefill the question, argmax, one decode per token). With a
// draft (the full-cache answer to the same question) the question is prefilled the same way, and
// when the first token agrees, the whole draft is fed in ONE batched pass: its per-position
// argmaxes say how far the greedy answer follows the draft; decoding one token at a time resumes
// only after the first difference. In exact arithmetic the result is the greedy answer; in fp32
// the batched pass rounds differently from one-token decodes, so a near-tie between the two best
// tokens can (rarely) resolve differently than in `kvzip query`. The cache is back at its state
// before the call afterwards, also when this throws.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "model/forward.h"
#include "model/kv_cache.h"

namespace kvzip::eval {

struct GreedyAnswer {
  std::vector<int32_t> tokens;      // answer ids, stop token excluded
  bool stopped = false;             // ended on a stop token
  std::vector<float> first_logits;  // (V) the distribution that chose the first token
  uint32_t decode_steps = 0;        // one-token forward passes run (the draft saves these)
};

struct AnswerParams {
  uint32_t max_tokens = 24;
  std::vector<int32_t> stop_tokens;  // as GenerateParams::stop_tokens
};

// Answers `prompt` (question tokens, already templated) greedily from `cache`. `draft` may be
// null (plain greedy decoding). Errors as generate() (empty prompt, context exceeded).
GreedyAnswer answer_greedy(Forward& forward, AttentionCache& cache, std::span<const int32_t> prompt,
                           const AnswerParams& params, const GreedyAnswer* draft = nullptr);

}  // namespace kvzip::eval
