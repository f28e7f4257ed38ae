// Internal to compress/: the factories behind make_scorer and helpers every scorer shares.
#pragma once
#include <memory>
#include <vector>

#include "compress/scorer.h"

namespace kvzip::compress::detail {

std::unique_ptr<Scorer> make_kvzip_scorer(const ScorerOptions& options);
std::unique_ptr<Scorer> make_full_scorer();
std::unique_ptr<Scorer> make_random_scorer(const ScorerOptions& options);
std::unique_ptr<Scorer> make_streaming_scorer(const ScorerOptions& options);
std::unique_ptr<Scorer> make_snapkv_scorer(const ScorerOptions& options);
std::unique_ptr<Scorer> make_h2o_scorer(const ScorerOptions& options);
std::unique_ptr<Scorer> make_restkv_scorer(const ScorerOptions& options);
std::unique_ptr<Scorer> make_rkv_scorer(const ScorerOptions& options);

// Throws Errc::invalid_argument when the input is incomplete or the cache's logical length is not
// n_prefix + document.size(). `method` names the caller in the message.
void check_score_input(const ScoreInput& in, const char* method);
// Scores of the input's shape, every value `fill`.
DocumentScores make_scores(const ScoreInput& in, float fill);
// The bookkeeping every prefill observer of a scorer shares: which [prefix ; document] prefill it
// is armed for and how far each layer has seen it. A scorer arms it in prefill_observer(),
// advances it from its observer's on_attention() and checks it at score().
class PrefillWatch {
 public:
  void arm(uint32_t n_layers, uint32_t n_prefix, uint32_t n_doc);
  uint32_t total() const { return n_prefix_ + n_doc_; }
  // Checks that obs continues its layer's sequence inside the prefill and advances it; throws
  // Errc::invalid_argument otherwise (an observer attached to some other forward call).
  void advance(const model::AttentionObservation& obs);
  // check_score_input, then that `in` is the prefill the watch was armed for and that every layer
  // observed all of it; Errc::invalid_argument naming the method and what it needs (`needs`, e.g.
  // "scores from the prefill's attention") otherwise.
  void check(const ScoreInput& in, const char* method, const char* needs) const;

 private:
  std::vector<uint32_t> seen_;  // (L) next position each layer expects
  uint32_t n_prefix_ = 0, n_doc_ = 0;
  bool armed_ = false;
};

// Validation messages of make_*_scorer: Errc::invalid_argument "<what> is <v>, expected ...".
void require_positive(const char* what, uint32_t v, uint32_t dflt);  // v >= 1
void require_odd(const char* what, uint32_t v, uint32_t dflt);       // v odd (hence >= 1)

}  // namespace kvzip::compress::detail
