// The prefill loop Forward and GpuForward share: check the inputs, size the logits for the mode,
// run the tokens in chunks of at most `chunk`, and roll the cache back to where it was when
// anything throws (so a failed call leaves the cache as it found it).
#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "model/detail/forward_check.h"
#include "model/forward.h"

namespace kvzip::model::detail {

// run(tokens, T, row0, rows, out) appends T tokens and writes the logits of the chunk's rows
// [row0, row0 + rows) to out (rows == 0: none). finish() runs after the last chunk, still under
// the rollback (the GPU waits for its stream there).
template <class Cache, class Run, class Finish>
std::vector<float> forward_in_chunks(const ModelConfig& cfg, Cache& cache,
                                     std::span<const int32_t> tokens, LogitsMode mode,
                                     uint32_t chunk, Run run, Finish finish) {
  check_cache_shape(cfg, cache.shape());
  check_tokens(cfg, tokens);
  const size_t V = cfg.vocab_size, n = tokens.size();
  std::vector<float> logits;
  if (mode == LogitsMode::Last && n > 0) logits.resize(V);
  if (mode == LogitsMode::All) logits.resize(n * V);

  const uint32_t start = cache.logical_length();
  try {
    for (size_t off = 0; off < n; off += chunk) {
      const uint32_t T = static_cast<uint32_t>(std::min<size_t>(chunk, n - off));
      uint32_t row0 = 0, rows = 0;
      float* out = nullptr;
      if (mode == LogitsMode::All) {
        rows = T;
        out = logits.data() + off * V;
      } else if (mode == LogitsMode::Last && off + T == n) {
        row0 = T - 1;
        rows = 1;
        out = logits.data();
      }
      run(tokens.data() + off, T, row0, rows, out);
    }
    finish();
  } catch (...) {
    cache.rollback(start);
    throw;
  }
  return logits;
}

}  // namespace kvzip::model::detail
