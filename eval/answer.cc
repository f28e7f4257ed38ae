// answer_greedy (see answer.h). Invariant of the draft path: while the answer so far equals the
// draft's first tokens, `rows` holds the logits after each fed draft token, and the cache holds
// the prompt plus `fed` draft tokens; leaving it rolls the cache back to exactly the answer so far.
#include "eval/answer.h"

#include <algorithm>

#include "common/error.h"
#include "model/model.h"
#include "model/sampling.h"

namespace kvzip::eval {
namespace {

struct RestoreCache {  // back to the state before the call however answer_greedy ends
  AttentionCache& cache;
  uint32_t length;
  ~RestoreCache() { cache.rollback(length); }
};

bool is_stop(const AnswerParams& p, int32_t tok) {
  return std::find(p.stop_tokens.begin(), p.stop_tokens.end(), tok) != p.stop_tokens.end();
}

GreedyAnswer plain(Forward& forward, AttentionCache& cache, std::span<const int32_t> prompt,
                   const AnswerParams& params) {
  GenerateParams gp;
  gp.max_tokens = params.max_tokens;
  gp.stop_tokens = params.stop_tokens;
  GenerateResult r = generate(forward, cache, prompt, gp);
  GreedyAnswer a;
  a.tokens = std::move(r.tokens);
  a.stopped = r.stopped;
  a.first_logits = std::move(r.first_logits);
  a.decode_steps = a.tokens.empty() ? 0 : static_cast<uint32_t>(a.tokens.size()) - (a.stopped ? 0 : 1);
  return a;
}

}  // namespace

GreedyAnswer answer_greedy(Forward& forward, AttentionCache& cache, std::span<const int32_t> prompt,
                           const AnswerParams& params, const GreedyAnswer* draft) {
  RestoreCache restore{cache, cache.logical_length()};
  if (!draft) return plain(forward, cache, prompt, params);
  const ModelConfig& cfg = forward.config();
  if (prompt.empty()) throw Error(Errc::invalid_argument, "answer: the prompt has no tokens");
  const uint64_t after_prompt = uint64_t(cache.logical_length()) + prompt.size();
  if (cfg.max_context && after_prompt > cfg.max_context)
    throw Error(Errc::invalid_argument,
                "the prompt needs " + std::to_string(after_prompt) + " positions but the model's context is " +
                    std::to_string(cfg.max_context) + " tokens; shorten the input");
  const size_t V = cfg.vocab_size;
  GreedyAnswer a;
  std::vector<float> logits = forward.prefill(cache, prompt, LogitsMode::Last);
  a.first_logits = logits;
  const float* cur = logits.data();
  std::vector<float> rows;  // (fed, V): logits after draft token j
  size_t fed = 0;
  bool tried = false;
  while (a.tokens.size() < params.max_tokens) {
    const int32_t tok = argmax(std::span<const float>(cur, V));
    if (is_stop(params, tok)) {
      a.stopped = true;
      break;
    }
    const size_t i = a.tokens.size();  // index of tok in the answer
    a.tokens.push_back(tok);
    if (a.tokens.size() == params.max_tokens) break;
    if (cfg.max_context && after_prompt + i + 1 > cfg.max_context) break;  // as generate()
    if (!tried && i == 0 && !draft->tokens.empty() && tok == draft->tokens[0]) {
      tried = true;
      // Feed the draft up to the last token whose successor the answer can still need.
      size_t k = std::min<size_t>(draft->tokens.size(), params.max_tokens - 1);
      if (cfg.max_context) k = std::min<size_t>(k, cfg.max_context - after_prompt);
      rows = forward.prefill(cache, std::span<const int32_t>(draft->tokens.data(), k), LogitsMode::All);
      fed = k;
    }
    if (i < fed && tok == draft->tokens[i]) {  // still on the draft: its logits are ready
      cur = rows.data() + i * V;
      continue;
    }
    if (fed > 0) {  // off the draft: keep only the answer's tokens before tok
      cache.rollback(static_cast<uint32_t>(after_prompt + i));
      fed = 0;
      rows.clear();
    }
    logits = forward.decode(cache, tok);
    cur = logits.data();
    ++a.decode_steps;
  }
  return a;
}

}  // namespace kvzip::eval
