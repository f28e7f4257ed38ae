// Internal to compress/: the two ends of compress() that the CPU and the GPU pipelines share, so
// that both validate the same way and record the same result: the checks before any model work,
// and selection + eviction + the recorded parameters after the scores.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "cache/stream_cache.h"
#include "compress/pipeline.h"

namespace kvzip::compress::detail {

// make_method_scorer(options) plus what needs the model's shape: kvzip-head's head-score count
// and the context check of the document and its answer room.
std::unique_ptr<Scorer> checked_scorer(const ModelConfig& config, size_t n_prefix, size_t n_doc,
                                       const CompressOptions& options);

// Selects (select_for_method at the method's ratio: 1 for "full"), evicts from `dense` and fills
// the result; prefill_s and scoring_s are the caller's timings. For kvzip-head the scoring time
// (broadcasting stored scores, no model work) is counted as selection and scoring_s is 0.
CompressResult finish(const CompressOptions& options, const Scorer& scorer,
                      const model::KvCache& dense, const DocumentScores& scores, double prefill_s,
                      double scoring_s);

// A streamed compression before its rows leave the stream cache: compress_streaming turns them
// into the result's RaggedKvCache, compress_to_file straight into the file's layers.
struct StreamRun {
  explicit StreamRun(model::CacheShape shape) : cache(shape) {}
  model::StreamKvCache cache;
  std::vector<std::vector<float>> kept_scores;  // as EvictResult::kept_scores
  double achieved_ratio = 1.0;
  std::string method;
  MethodParams params;
  double prefill_s = 0.0, scoring_s = 0.0, select_s = 0.0;
  uint64_t peak_rows = 0, peak_bytes = 0;
};
StreamRun stream_document(model::Forward& forward, std::span<const int32_t> prefix,
                          std::span<const int32_t> document, const CompressOptions& options);

// The stream cache's rows as a file's layers (layers_from_cache's form), each layer's heads freed
// as soon as they are copied.
std::vector<format::LayerKv> layers_from_stream(model::StreamKvCache& cache,
                                                const std::vector<std::vector<float>>& kept_scores);

}  // namespace kvzip::compress::detail
