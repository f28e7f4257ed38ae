// The generation loop shared by the CPU (model/model.cc) and GPU (model/gpu_forward.cc) forward
// passes: prefill the prompt, then sample and feed back one token at a time. Fwd needs config(),
// prefill(cache, tokens, LogitsMode::Last) and decode(cache, token); Cache needs logical_length().
#pragma once
#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "common/error.h"
#include "model/model.h"
#include "model/sampling.h"

namespace kvzip::detail {

template <class Fwd, class Cache>
GenerateResult generate_loop(Fwd& forward, Cache& cache, std::span<const int32_t> prompt,
                             const GenerateParams& params, const TokenCallback& on_token) {
  const ModelConfig& cfg = forward.config();
  if (prompt.empty()) throw Error(Errc::invalid_argument, "generate: the prompt has no tokens");
  const uint64_t need = uint64_t(cache.logical_length()) + prompt.size();
  if (cfg.max_context && need > cfg.max_context)
    throw Error(Errc::invalid_argument,
                "the prompt needs " + std::to_string(need) + " positions but the model's context is " +
                    std::to_string(cfg.max_context) + " tokens; shorten the input");
  GenerateResult result;
  Sampler sampler(params.sampling);
  std::vector<float> logits = forward.prefill(cache, prompt, LogitsMode::Last);
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
    logits = forward.decode(cache, tok);
  }
  return result;
}

}  // namespace kvzip::detail
