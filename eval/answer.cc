// answer_greedy (see answer.h). Invariant while a draft batch is live: the answer's tokens
// [b0, i) equal the draft's, the cache holds the prompt, the answer before b0 and the draft's
// tokens [b0, b1), and rows[j - b0] are the logits after draft token j. Leaving the batch rolls the
// cache back to exactly the answer so far.
#include "eval/answer.h"

#include <algorithm>

#include "common/error.h"
#include "model/model.h"
#include "model/sampling.h"

namespace kvzip::eval {
namespace {

// Draft tokens fed by the first batch after the question or after a difference; each batch used
// up doubles it. A batched pass costs about its weight read plus a fixed time per token, so a
// short first batch bounds the work lost when the answer leaves the draft early.
constexpr size_t kFirstChunk = 8;

struct RestoreCache {  // back to the state before the call however answer_greedy ends
  model::AttentionCache& cache;
  uint32_t length;
  ~RestoreCache() { cache.rollback(length); }
};

bool is_stop(const AnswerParams& p, int32_t tok) {
  return std::find(p.stop_tokens.begin(), p.stop_tokens.end(), tok) != p.stop_tokens.end();
}

GreedyAnswer plain(model::Forward& forward, model::AttentionCache& cache,
                   std::span<const int32_t> prompt, const AnswerParams& params) {
  model::GenerateParams gp;
  gp.max_tokens = params.max_tokens;
  gp.stop_tokens = params.stop_tokens;
  model::GenerateResult r = generate(forward, cache, prompt, gp);
  GreedyAnswer a;
  a.tokens = std::move(r.tokens);
  a.stopped = r.stopped;
  a.first_logits = std::move(r.first_logits);
  a.decode_steps =
      a.tokens.empty() ? 0 : static_cast<uint32_t>(a.tokens.size()) - (a.stopped ? 0 : 1);
  return a;
}

}  // namespace

void DraftPool::add(const std::vector<int32_t>& tokens) {
  if (std::find(drafts_.begin(), drafts_.end(), tokens) == drafts_.end()) drafts_.push_back(tokens);
}

const std::vector<int32_t>* DraftPool::find(std::span<const int32_t> prefix, size_t extra) const {
  for (auto it = drafts_.rbegin(); it != drafts_.rend(); ++it)
    if (it->size() >= prefix.size() + extra &&
        std::equal(prefix.begin(), prefix.end(), it->begin()))
      return &*it;
  return nullptr;
}

GreedyAnswer answer_greedy(model::Forward& forward, model::AttentionCache& cache,
                           std::span<const int32_t> prompt, const AnswerParams& params,
                           const DraftPool* drafts) {
  RestoreCache restore{cache, cache.logical_length()};
  if (!drafts) return plain(forward, cache, prompt, params);
  const ModelConfig& cfg = forward.config();
  model::check_prompt_fits(cfg, cache.logical_length(), prompt.size(), "answer");
  const uint64_t after_prompt = uint64_t(cache.logical_length()) + prompt.size();
  const size_t V = cfg.vocab_size;
  // The answer never needs the logits after its last allowed token, nor positions past the context.
  const uint64_t feed_end =
      std::min<uint64_t>(params.max_tokens ? params.max_tokens - 1 : 0,
                         cfg.max_context ? cfg.max_context - after_prompt : UINT64_MAX);
  GreedyAnswer a;
  std::vector<float> logits = forward.prefill(cache, prompt, model::LogitsMode::Last);
  a.first_logits = logits;
  const float* cur = logits.data();
  std::vector<float> rows;                      // (b1 - b0, V)
  const std::vector<int32_t>* batch = nullptr;  // the live draft
  size_t b0 = 0, b1 = 0;
  size_t chunk = kFirstChunk;  // draft tokens the next batch may feed
  while (a.tokens.size() < params.max_tokens) {
    const int32_t tok = model::argmax(std::span<const float>(cur, V));
    if (is_stop(params, tok)) {
      a.stopped = true;
      break;
    }
    const size_t i = a.tokens.size();  // index of tok in the answer
    a.tokens.push_back(tok);
    if (a.tokens.size() == params.max_tokens) break;
    if (cfg.max_context && after_prompt + i + 1 > cfg.max_context) break;  // as generate()
    if (batch && i < b1 && tok == (*batch)[i]) {  // still on the draft: its logits are ready
      cur = rows.data() + (i - b0) * V;
      continue;
    }
    if (batch) {  // off the batch: keep only the answer's tokens before tok
      chunk = i == b1 ? chunk * 2 : kFirstChunk;  // used up: trust the drafts more
      cache.rollback(static_cast<uint32_t>(after_prompt + i));
      batch = nullptr;
    }
    const std::vector<int32_t>* d = drafts->find(a.tokens, 1);
    const size_t k =
        d ? static_cast<size_t>(std::min<uint64_t>({d->size(), feed_end, i + chunk})) : 0;
    if (d && k >= i + 2) {  // at least two tokens: cheaper than decoding them one by one
      rows = forward.prefill(cache, std::span<const int32_t>(d->data() + i, k - i),
                             model::LogitsMode::All);
      batch = d;
      b0 = i;
      b1 = k;
      cur = rows.data();
      ++a.draft_passes;
      continue;
    }
    logits = forward.decode(cache, tok);
    cur = logits.data();
    ++a.decode_steps;
  }
  return a;
}

}  // namespace kvzip::eval
