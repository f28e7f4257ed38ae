// The generation loop shared by the CPU (model/model.cc) and GPU (model/gpu_forward.cc) forward
// passes: prefill the prompt, then sample and feed back one token at a time. Fwd needs config(),
// prefill(cache, tokens, LogitsMode::Last, observer) and decode(cache, token, observer); Cache
// needs logical_length(). Hooks (NoHooks for none) lets a cache policy watch every forward call
// (observer()) and act after the prompt's prefill and after each decode (R-KV, model/rkv.h).
#pragma once
#include <algorithm>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "common/error.h"
#include "model/model.h"
#include "model/sampling.h"

namespace kvzip::model::detail {

struct NoHooks {
  void after_prefill() {}
  void after_decode() {}
};

template <class Fwd, class Cache, class Hooks = NoHooks>
GenerateResult generate_loop(Fwd& forward, Cache& cache, std::span<const int32_t> prompt,
                             const GenerateParams& params, const TokenCallback& on_token,
                             Hooks&& hooks = {}) {
  const ModelConfig& cfg = forward.config();
  check_prompt_fits(cfg, cache.logical_length(), prompt.size(), "generate");
  GenerateResult result;
  Sampler sampler(params.sampling);
  constexpr bool kHooked = !std::is_same_v<std::decay_t<Hooks>, NoHooks>;
  std::vector<float> logits;
  if constexpr (kHooked)
    logits = forward.prefill(cache, prompt, LogitsMode::Last, hooks.observer());
  else logits = forward.prefill(cache, prompt, LogitsMode::Last);
  hooks.after_prefill();
  result.first_logits = logits;
  for (uint32_t i = 0; i < params.max_tokens; ++i) {
    const int32_t tok = sampler.sample(logits);
    if (std::find(params.stop_tokens.begin(), params.stop_tokens.end(), tok) !=
        params.stop_tokens.end()) {
      result.stopped = true;
      break;
    }
    result.tokens.push_back(tok);
    if (on_token && !on_token(tok)) break;
    if (i + 1 == params.max_tokens) break;
    if (cfg.max_context && cache.logical_length() + 1 > cfg.max_context) break;
    if constexpr (kHooked) logits = forward.decode(cache, tok, hooks.observer());
    else logits = forward.decode(cache, tok);
    hooks.after_decode();
  }
  return result;
}

}  // namespace kvzip::model::detail
