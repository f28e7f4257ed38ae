// Internal to compress/: the factories behind make_scorer and helpers every scorer shares.
#pragma once
#include <memory>
#include <vector>

#include "compress/compress.h"

namespace kvzip::detail {

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
// A prefill observer's bookkeeping: `seen` (L) is the next position each layer expects. Checks that
// obs continues its layer's sequence inside a `total`-token prefill and advances it; throws
// Errc::invalid_argument otherwise (an observer attached to some other forward call).
void advance_prefill(std::vector<uint32_t>& seen, const AttentionObservation& obs, uint32_t total);

}  // namespace kvzip::detail
