// compress/ selection and eviction: which document rows of a scored cache to keep (a global
// threshold, per head, per layer; spec/methods.md §1 step 7) and the compressed RaggedKvCache
// built from the kept rows. Head-level selection (whole heads) is compress/head_level.h.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "compress/scorer.h"
#include "cache/kv_cache.h"
#include "cache/ragged_cache.h"

namespace kvzip::compress {

enum class SelectionLevel : uint8_t {
  Global = 0,    // one threshold over all L·Hkv·n_c scores: keeps K = round(r·L·Hkv·n_c) rows
  PerHead = 1,   // each (layer, head) keeps its top ⌊r·n_c⌋ rows (methods §1 step 7, as the authors)
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
  uint64_t kept_doc = 0;     // document rows kept, over all (layer, head); global layers on a hybrid model
  uint64_t total_doc = 0;    // L·Hkv·n_c; L_g·Hkv·n_c on a hybrid model
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

struct EvictResult {
  model::RaggedKvCache cache;
  std::vector<std::vector<float>> kept_scores;  // (L) × (R_l): the score of every kept row, in the
                                                // cache's row order (head-major, by position);
                                                // prefix rows get +inf (never evicted)
  double achieved_ratio = 1.0;
};

// Builds the compressed cache: RaggedKvCache::from_dense(dense, selection.keep, room).
EvictResult evict(const model::KvCache& dense, const DocumentScores& scores, const Selection& selection,
                  uint32_t room = 256);

}  // namespace kvzip::compress
