// Helpers for the compress/ tests and the prefill tests (tests/model/test_prefill.cc): a query
// recorder built on the forward's trace and a scored random document. The naive reference forward
// and random tokens are in tests/support/naive_forward.h (shared with the model tests).
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string_view>
#include <vector>

#include "checkpoint/weights.h"
#include "common/error.h"
#include "compress/scorer.h"
#include "model/forward.h"
#include "tests/support/naive_forward.h"
#include "tests/support/random_weights.h"

namespace kvzip::test {

// Post-RoPE queries recorded from a Forward's trace ("q_rope"), indexed by position:
// q[layer][(position - first) * Hq * D ...] for positions first, first + 1, ...
struct QueryRecorder {
  uint32_t first = 0;  // position of the first recorded row
  uint32_t Hq = 0, D = 0;
  std::vector<std::vector<float>> q;  // (L) × (rows, Hq, D)
  void clear(uint32_t first_position) {
    first = first_position;
    for (auto& v : q) v.clear();
  }
  model::TraceFn
  trace_fn();  // attach as ForwardOptions::trace; this recorder must outlive the Forward
  const float* at(uint32_t layer, uint32_t position, uint32_t head) const {
    return q[layer].data() + (size_t(position - first) * Hq + head) * D;
  }
};

// A random prompt on the tiny qwen2 model (Hq = 6, Hkv = 2): weights from `seed`, prefix, document
// and question tokens from seed + 1, + 2, + 3.
struct TinyDoc {
  ModelConfig cfg = tiny_qwen2_config();
  model::Weights w;
  std::vector<int32_t> prefix, doc, question;
  TinyDoc(uint32_t n_prefix, uint32_t n_doc, uint32_t n_question, uint64_t seed)
      : w(random_weights(cfg, seed)),
        prefix(random_tokens(n_prefix, cfg.vocab_size, seed + 1)),
        doc(random_tokens(n_doc, cfg.vocab_size, seed + 2)),
        question(random_tokens(n_question, cfg.vocab_size, seed + 3)) {}
};

// KVzip's options for token ids of the tiny models: short stand-in reconstruction prompts
// ({3, 4, 5}, {6, 7, 8, 9}, turn end {10, 11}), chunks of 16 tokens, fp32 attention.
compress::ScorerOptions tiny_kvzip_options();

// The message of a prefill refused for not fitting the context (Errc::invalid_argument): it
// names the parts of the sequence, their sum and the model's context; each needle must be in it.
void check_context_refusal(const Error& e, std::initializer_list<const char*> needles);

// True when make_scorer(method, options) throws Errc::invalid_argument with `what` in its message
// (CHECKed), false when it accepts the options.
bool scorer_refuses(std::string_view method, const compress::ScorerOptions& options,
                    const char* what);

// A random document on the tiny qwen2 model (Hq = 6, Hkv = 2: G = 3) scored by one scorer, with
// what naive references need afterwards: the dense cache and every position's post-RoPE queries.
// Seeds: weights `seed`, prefix seed + 1, document seed + 2. The prefill runs in chunks of
// `prefill_chunk` tokens so that probe windows straddle a chunk boundary.
struct ScoredDocument {
  ModelConfig cfg = tiny_qwen2_config();
  model::Weights w;
  uint32_t n_p;
  std::vector<int32_t> prefix, doc;
  QueryRecorder rec;
  model::KvCache cache{cfg};
  uint32_t prefill_chunk;

  ScoredDocument(uint32_t n_c, uint64_t seed, uint32_t n_prefix, uint32_t chunk)
      : w(random_weights(cfg, seed)),
        n_p(n_prefix),
        prefix(random_tokens(n_prefix, cfg.vocab_size, seed + 1)),
        doc(random_tokens(n_c, cfg.vocab_size, seed + 2)),
        prefill_chunk(chunk) {}

  // Prefills [prefix ; doc] with the scorer's observer, scores, keeps the dense cache.
  compress::DocumentScores score(compress::Scorer& scorer);
  // Whether `method` (default options) refuses to score a prefill that ran without its observer.
  bool unobserved_refused(std::string_view method) const;
};

}  // namespace kvzip::test
