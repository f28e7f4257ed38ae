// compress/ selection and eviction: which document rows of a scored cache to keep (a global
// threshold, per head, per layer; spec/methods.md §1 step 7) and the compressed RaggedKvCache
// built from the kept rows. Head-level selection (whole heads) is compress/head_level.h.
#pragma once
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "cache/kv_cache.h"
#include "cache/ragged_cache.h"
#include "compress/scorer.h"

namespace kvzip::compress {

enum class SelectionLevel : uint8_t {
  Global = 0,  // one threshold over all L·Hkv·n_c scores: keeps K = round(r·L·Hkv·n_c) rows
  PerHead = 1,  // each (layer, head) keeps its top ⌊r·n_c⌋ rows (methods §1 step 7, as the authors)
  PerLayer = 2,  // each layer keeps its top round(r·Hkv·n_c) rows, thresholded over its heads
};
// "global", "per-head", "per-layer"; anything else throws Errc::invalid_argument listing them.
SelectionLevel parse_selection_level(std::string_view name);
const char* selection_level_name(SelectionLevel level);

// Throws Errc::invalid_argument unless 0 < ratio <= 1 (and finite): the one range check of a
// ratio, made by check_options (compress/pipeline.h) before any work and by the stages a caller
// may run alone (select_rows, heads_kept).
void check_ratio(double ratio);

// Hybrid models (DocumentScores::local_layers): what the ratio counts. A local layer's query sees
// only its last `window` positions, so of the document the rows any later query can reach are the
// last window - 1 (the first query token is the window's last row); those are kept in every local
// layer, with the prefix rows (as in every layer), and nothing else. --ratio and every level
// (global, per-layer, per-head) apply to the global layers' document rows only: the budget is
// round(r·L_g·Hkv·n_c) (per level as below), and kept_doc / total_doc / achieved_ratio count
// global layers only. The fraction of all document rows kept is reported beside it (make_contents).
struct Selection {
  // (L·Hkv) ascending dense row indices to keep per (layer, head): all prefix rows, then the kept
  // document rows.
  std::vector<std::vector<uint32_t>> keep;
  uint64_t kept_doc =
      0;  // document rows kept, over all (layer, head); global layers on a hybrid model
  uint64_t total_doc = 0;       // L·Hkv·n_c; L_g·Hkv·n_c on a hybrid model
  double achieved_ratio = 1.0;  // kept_doc / total_doc (1 for an empty document)
};

// Copies the model's hybrid layout (local layers, window) into scores; nothing for a model whose
// layers are all global.
void set_hybrid_layout(DocumentScores& scores, const ModelConfig& config);
// Overrides every local layer's keep list with its reachable rows (prefix + the document's last
// window - 1); a no-op without local layers. select_rows calls it; head-level selection too.
void keep_local_windows(const DocumentScores& scores, Selection& selection);

// Tie policy: the budget is always met exactly; among equal scores at the cut the row with the
// lower flat index (layer, head, position) is kept. (The authors' code keeps only scores strictly
// above the cut, which can keep fewer rows than asked.) ratio == 1 keeps every row. format::prune
// applies the same rule (Global budget, ties by file order = flat index) to a stored cache.
Selection select_rows(const DocumentScores& scores, double ratio, SelectionLevel level);

// The selection of select_rows made while the document is still being read (compress --stream):
// the scores arrive a chunk of document rows at a time, and after each chunk the rows that can no
// longer be among the final kept ones are named, so they can be dropped at once. A level's budget
// is fixed by the document's length alone, and the order (score descending, then flat index
// (layer, head, position) ascending) is total, so the k-th best of the rows seen so far only rises:
// a row outside the running top k is outside the final one. After the last chunk, selection()
// equals select_rows(all the scores, ratio, level) exactly. Local (sliding-window) layers keep the
// prefix and their last window - 1 document rows as the document goes, which ends at
// keep_local_windows'. Holds at most budget + one chunk of rows per group, never the document.
class RunningSelection {
 public:
  // Errc::invalid_argument for a ratio outside (0, 1] (check_ratio). local_layers (L) or empty.
  RunningSelection(model::CacheShape shape, uint32_t n_prefix, uint32_t n_doc, double ratio,
                   SelectionLevel level, std::vector<uint8_t> local_layers = {},
                   uint32_t window = 0);
  // The scores of document rows [done(), done() + T): scores[(l·Hkv + h)·stride + t] for row
  // done() + t (local layers' values are not read; +inf always keeps). Returns, per (l·Hkv + h),
  // the document rows (ascending j) to drop now; every row not named stays until a later add
  // names it. Errc::invalid_argument for a NaN score or rows past the document.
  const std::vector<std::vector<uint32_t>>& add(uint32_t T, const float* scores, size_t stride);
  uint32_t done() const { return done_; }
  // Document rows held (the running kept set), over all (layer, head).
  uint64_t held() const;
  // After the last chunk: the kept rows as select_rows returns them. Errc::internal before.
  Selection selection() const;
  // After the last chunk: (L) × the score of every kept row in a RaggedKvCache's row order
  // (head-major, by position); prefix and local-layer rows +inf (EvictResult::kept_scores).
  std::vector<std::vector<float>> kept_scores() const;

 private:
  struct Row {
    float score;
    uint32_t head;  // l·Hkv + h
    uint32_t j;     // document row
  };
  std::vector<std::vector<std::pair<uint32_t, float>>> by_head() const;

  model::CacheShape shape_;
  uint32_t n_prefix_, n_doc_, window_;
  std::vector<uint8_t> local_;
  std::vector<int32_t> group_of_;         // (L·Hkv): the group of each head, -1 for a local layer
  std::vector<std::vector<Row>> groups_;  // the running kept rows of each group
  std::vector<uint64_t> budget_;          // rows each group keeps at the end
  std::vector<std::vector<uint32_t>> drops_;
  uint64_t total_doc_ = 0;
  uint32_t done_ = 0;
};

struct EvictResult {
  model::RaggedKvCache cache;
  std::vector<std::vector<float>> kept_scores;  // (L) × (R_l): the score of every kept row, in the
                                                // cache's row order (head-major, by position);
                                                // prefix rows get +inf (never evicted)
  double achieved_ratio = 1.0;
};

// Builds the compressed cache: RaggedKvCache::from_dense(dense, selection.keep, room).
EvictResult evict(const model::KvCache& dense, const DocumentScores& scores,
                  const Selection& selection, uint32_t room = 256);

}  // namespace kvzip::compress
