// ComposedCache: one answer's view of several compressed documents placed one after another
// (spec/kvzip_format.md "Composing caches"). Each document's loaded cache (a KvBase, f32 or q8/q4
// as stored) is shared read-only and never copied: the view hands attention every document as a
// block of rows at a shift Δ (its rows' composed position = stored position + Δ), attended with
// the queries rotated back by Δ (kernels/attention.h, AttentionArgs::parts). The cache owns only
// its own rows, in one private dense store in increasing position: the separators computed
// between documents, the rows recomputed with the earlier documents in view (selective recompute),
// then the question and answer. Stored rows can be left out per document by position (the
// document's own prefix rows, rows replaced by recomputed ones) through skip bitmaps.
// Building (loader/compose.h) runs the forward pass over staged views: rows(d, positions) makes the
// next appended tokens sit at `positions` while only documents [0, d) are seen, and, with limited
// documents, each one's stored rows before each token's own position (so one forward pass can
// hold tokens of several stages: every separator at once). seal() ends the
// building; from then on appended tokens continue at the composed length and see every document.
// Hybrid models (Gemma 3, ComposedWindow): in a sliding-window layer a token at composed position
// p sees only the rows at positions (p - window, p], of the documents and of its own store alike,
// and the documents' keys there were rotated with the local RoPE base, so their queries are
// rotated back with it. The documents' rows skip positions (evicted rows, the other documents'),
// so the window is a first visible row per token and block (kernels::KvSpan::from), found by
// position for each append, never a count of rows.
// Invariants: documents never overlap in composed positions except where a document keeps its own
// prefix rows as sinks; rollback never reaches below the sealed length.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "cache/kv_base.h"
#include "cache/kv_cache.h"
#include "kernels/attention.h"

namespace kvzip::model {

// One document of a composition.
struct ComposedDoc {
  const KvBase* base = nullptr;  // shared, read-only; must outlive the ComposedCache
  uint32_t shift = 0;            // composed position = stored position + shift
  uint32_t skip_below = 0;       // stored rows at positions below this are left out (0: none)
  uint32_t first = 0;            // composed position of its first document token: a token staged
                                 // before it never sees the document (rows(); 0: no such rule)
};

// The sliding-window layers of a hybrid model (ModelConfig::local_layers), or none (empty).
struct ComposedWindow {
  std::vector<uint8_t> local_layers;  // (L) 1 = a sliding-window layer; empty: every layer global
  uint32_t window = 0;                // ModelConfig::sliding_window
  std::vector<float> inv_freq;        // (D/2) the local layers' RoPE frequencies (local base)
  bool is_local(uint32_t layer) const { return layer < local_layers.size() && local_layers[layer]; }
};
ComposedWindow composed_window(const ModelConfig& config);  // none for a model without local layers

class ComposedCache final : public AttentionCache {
 public:
  // `docs` of one shape; `inv_freq` (D/2) the model's RoPE frequencies (kernels::rope_inv_freq);
  // `length` the composed length (the first question token's position); `local` the model's
  // sliding-window layers. Errc::invalid_argument for no documents or documents of another shape;
  // Errc::unsupported for q8/q4 rows with sliding-window layers (the loader dequantizes the files
  // of such models).
  ComposedCache(std::vector<ComposedDoc> docs, const std::vector<float>& inv_freq, uint32_t length,
                ComposedWindow local = {});

  CacheShape shape() const override { return shape_; }
  uint32_t logical_length() const override;
  void reserve_append(uint32_t T) override;
  void append(uint32_t layer, const float* k_new, const float* v_new, uint32_t T) override;
  void commit_append(uint32_t T) override;
  KvHeadView view(uint32_t layer, uint32_t kv_head) const override;
  void rollback(uint32_t length) override;
  void next_positions(uint32_t T, uint32_t* out) const override;
  CacheParts parts(uint32_t layer) const override;

  // ---- building (before seal) ----
  // The next appended tokens (any number of forward calls) sit at `positions` (increasing, each
  // above every own row so far) and see documents [0, visible) whole, plus each document of
  // [visible, limited] (limited < n_docs, or -1 for none) up to their own positions: its stored
  // rows at composed positions below the token's, none for a token before ComposedDoc::first.
  void rows(uint32_t visible, int limited, std::vector<uint32_t> positions);
  // Leaves out document d's stored rows at these positions (sorted), in every layer and head.
  void skip(uint32_t d, std::span<const uint32_t> stored_positions);
  // Ends the building: appended tokens continue at the composed length and see every document.
  void seal();
  bool sealed() const { return sealed_; }

  uint32_t n_docs() const { return static_cast<uint32_t>(docs_.size()); }
  uint32_t composed_length() const { return length_; }
  uint32_t own_rows() const { return rows_; }  // rows of the private store (committed)
  uint64_t rows_seen() const;                  // rows attended per (l, h) summed: documents + own
  // Bytes this view owns: the private store, skip bitmaps, rotations and limits (none of the
  // documents' rows).
  uint64_t bytes_owned() const;

 private:
  struct HeadMask {  // per (doc, layer, head)
    std::vector<uint64_t> f32, quant;
  };
  void refresh_parts();  // spans_ and part_rot_ for the current stage
  // own_from_ and part_from_ for the pending tokens at `pos` (T), pointed at by spans_.
  void window_rows(const uint32_t* pos, uint32_t T);
  bool hybrid() const { return !local_.local_layers.empty(); }
  size_t hidx(uint32_t d, uint32_t l, uint32_t h) const {
    return (size_t(d) * shape_.n_layers + l) * shape_.n_kv_heads + h;
  }

  CacheShape shape_;
  std::vector<ComposedDoc> docs_;
  ComposedWindow local_;
  std::vector<float> rot_;         // (n_docs, 2, D/2) each document's query rotation by -shift
  std::vector<float> rot_local_;   // the same with the local layers' frequencies (hybrid)
  std::vector<HeadMask> masks_;    // (n_docs, L, Hkv)
  uint32_t length_ = 0;            // composed length
  KvCache own_;                    // private rows, dense
  std::vector<uint32_t> own_pos_;  // (own_ capacity) composed position of each private row
  uint32_t rows_ = 0;              // committed private rows
  uint32_t built_ = 0;             // private rows committed before seal()
  bool sealed_ = false;
  // Stage of the building.
  uint32_t visible_ = 0;
  int limited_ = -1;
  std::vector<uint32_t> staged_;  // positions of the tokens still to come
  uint32_t cursor_ = 0;           // next staged position
  // What parts() hands out: (L, n_parts, Hkv) spans; each limited document's limits per (l, h).
  std::vector<kernels::KvSpan> spans_;
  std::vector<float> part_rot_;        // (n_parts, 2, D/2)
  std::vector<float> part_rot_local_;  // (n_parts, 2, D/2) for the local layers (hybrid)
  // Hybrid: the first row each pending token sees, of the own store (one array for every local
  // layer and head: they hold the same positions) and of each part per (part, L, Hkv) (global
  // layers' entries stay empty).
  std::vector<uint32_t> own_from_;
  std::vector<std::vector<uint32_t>> part_from_;
  uint32_t n_parts_ = 0;
  // (limited documents, L, Hkv) × (2, staged): f32 rows, then quantized rows each token sees
  std::vector<std::vector<uint32_t>> limits_;
  uint32_t pending_ = 0;  // T of the append in progress
};

}  // namespace kvzip::model
