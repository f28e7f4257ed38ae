// Internal to compress/: the two ends of compress() that the CPU and the GPU pipelines share, so
// that both validate the same way and record the same result: the checks before any model work,
// and selection + eviction + the recorded parameters after the scores.
#pragma once
#include <memory>

#include "compress/pipeline.h"

namespace kvzip::compress::detail {

// make_method_scorer(options) plus what needs the model's shape: kvzip-head's head-score count
// and the context check of the document and its answer room.
std::unique_ptr<Scorer> checked_scorer(const ModelConfig& config, size_t n_prefix, size_t n_doc,
                                       const CompressOptions& options);

// Selects (select_for_method at the method's ratio: 1 for "full"), evicts from `dense` and fills
// the result; prefill_s and scoring_s are the caller's timings. For kvzip-head the scoring time
// (broadcasting stored scores, no model work) is counted as selection and scoring_s is 0.
CompressResult finish(const CompressOptions& options, const Scorer& scorer, const model::KvCache& dense,
                      const DocumentScores& scores, double prefill_s, double scoring_s);

}  // namespace kvzip::compress::detail
