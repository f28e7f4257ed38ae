// Head-level, context-independent KVzip (spec/methods.md §1 step 9). Calibration: KVzip-score
// one document once per model and keep head_score[l, h] = max_j score[l, h, j]. Compression of any
// later document then needs no scoring pass: the top fraction r of the L·Hkv heads keep the whole
// document, the others keep only the prefix P plus the last `window` document rows. Head scores
// are plain (L, Hkv) arrays here; format/head_scores.h stores them in a file. Compression with
// them is compress()'s method kvzip-head (compress/pipeline.h).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "compress/scorer.h"
#include "compress/selection.h"
#include "model/prefill.h"

namespace kvzip::compress {

inline constexpr const char* kHeadLevelMethod = "kvzip-head";  // method name in caches and eval
// CompressOptions::ratio of kvzip-head when none is asked: the fraction of heads kept whole
// (spec/methods.md §1 step 9).
inline constexpr double kHeadLevelDefaultRatio = 0.6;

// Errc::invalid_argument listing every method a command accepts (scorer_names() and
// kHeadLevelMethod, which is no scorer) unless `method` is one of them.
void check_method_name(std::string_view method);

// Throws Errc::invalid_argument unless head_scores holds L·Hkv values of `shape`, none NaN; `who`
// starts the message.
void check_head_scores(std::span<const float> head_scores, const model::CacheShape& shape,
                       const char* who);

// (L, Hkv): max over the document rows of each head's scores (-inf for an empty document).
std::vector<float> max_per_head(const DocumentScores& scores);

// DocumentScores in which every document row of head (l, h) scores head_scores[l, h], so that
// max_per_head gives head_scores back and the rows kept in a cache carry their head's score.
// Throws Errc::invalid_argument unless head_scores.size() == L·Hkv.
DocumentScores broadcast_head_scores(std::span<const float> head_scores,
                                     const model::CacheShape& shape, uint32_t n_prefix,
                                     uint32_t n_doc);

// Number of heads kept whole: round(head_ratio · L·Hkv) (as the global level rounds its budget).
uint32_t heads_kept(double head_ratio, uint32_t n_heads);

// Head-level selection. Heads are ranked by max_per_head(scores); the top heads_kept(head_ratio)
// (ties at the cut: the lower (layer, head) index is kept) keep every document row, the others
// the last min(window, n_c). The prefix is always kept. Hence the achieved document-row ratio is
//   (k·n_c + (L·Hkv − k)·min(window, n_c)) / (L·Hkv·n_c),   k = heads_kept(head_ratio, L·Hkv),
// which is k / (L·Hkv) with window 0. Throws Errc::invalid_argument for a ratio outside (0, 1]
// or a NaN score.
Selection select_heads(const DocumentScores& scores, double head_ratio, uint32_t window);

// A Scorer (for evaluations that score every method the same way) whose score() is
// broadcast_head_scores(head_scores, ...): no model work. Select its scores with select_heads.
// Throws Errc::invalid_argument at score() when the count is not the cache's L·Hkv.
std::unique_ptr<Scorer> make_head_level_scorer(std::vector<float> head_scores);

// ---- Calibration --------------------------------------------------------------------------

struct CalibrateResult {
  model::CacheShape shape;
  std::vector<float> head_scores;  // (L, Hkv) max_per_head of the KVzip scores
  uint32_t n_prefix = 0;
  uint32_t n_doc = 0;
  double prefill_s = 0.0;
  double scoring_s = 0.0;  // the reconstruction passes
};

// Prefills [prefix ; document], KVzip-scores it (scorer: prompts, kvzip_chunk, kvzip_hint) and
// reduces the scores per head. Throws Errc::invalid_argument for an empty document, and what
// prefill and the kvzip scorer throw.
CalibrateResult calibrate_heads(model::Forward& forward, std::span<const int32_t> prefix,
                                std::span<const int32_t> document, const ScorerOptions& scorer,
                                const prefill::PrefillOptions& prefill = {});

// ---- Compression (method kvzip-head of compress/pipeline.h) --------------------------------

struct HeadLevelOptions {
  std::vector<float> head_scores;  // (L, Hkv), e.g. format::HeadScores::values
  // Document rows (the last ones) that the other heads keep besides P. Default 0: the achieved
  // document-row ratio then equals the fraction of heads kept, so a head-level row sits on the
  // same ratio axis as every other method; P already plays the sink tokens' part, and the
  // question and answer tokens appended later are every head's recent window at query time.
  uint32_t window = 0;
  MethodParams source;  // appended to the recorded params (e.g. the file's checksum)
};

// What a head-level cache records: level "head", head_ratio, heads_kept "k/H" (H = n_heads),
// window, doc_ratio (the achieved document-row ratio), then `source`.
MethodParams head_level_params(double head_ratio, uint32_t n_heads, uint32_t window,
                               double doc_ratio, const MethodParams& source);

}  // namespace kvzip::compress
