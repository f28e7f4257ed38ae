// The attention cache the forward pass works through (AttentionCache), and the dense KvCache.
// Contract shared by every cache: per layer and KV head, rows of post-RoPE keys and values (D
// floats each) in increasing original position; the tokens appended by the current forward call
// are the last rows of every head. logical_length() is the length of the uncompressed sequence:
// the next token's RoPE position, never the number of rows kept (a ragged cache keeps fewer).
// Appending is a three-step protocol driven by the forward pass: reserve_append(T), then
// append(layer, ...) once per layer in order, then commit_append(T). rollback(n) forgets every
// position >= n in O(1) (also any uncommitted append), which query sessions use after an answer.
#pragma once
#include <cstdint>
#include <vector>

#include "common/model_config.h"

namespace kvzip::kernels {
struct KvQuantSegment;  // kernels/kv_quant.h
struct KvSpan;          // kernels/attention.h
}  // namespace kvzip::kernels

namespace kvzip::model {

struct CacheShape {
  uint32_t n_layers = 0;    // L
  uint32_t n_kv_heads = 0;  // Hkv
  uint32_t head_dim = 0;    // D
  bool operator==(const CacheShape&) const = default;
};

CacheShape cache_shape(const ModelConfig& cfg);

// One KV head of one layer as attention and observers read it. Rows [0, len), by default all at
// k/v/positions. A BranchCache (cache/branch_cache.h) has two segments: rows [0, split) of the
// shared base at k/v/positions and rows [split, len) of its own tail at k_tail/v_tail/
// positions_tail; readers that index k directly (the scorers' observers, R-KV) run on one-segment
// caches only, and the forward pass hands both segments to attention (KvSpan). A BranchCache over a
// q8/q4 base (cache/quant_base.h) adds `quant`: that head's quantized rows, which come before all
// the rows above and are not counted in len (only attention reads them, KvSpan::quant).
struct KvHeadView {
  const float* k = nullptr;             // (len, D) post-RoPE keys, or (split, D) with a tail
  const float* v = nullptr;             // (len, D) values, or (split, D) with a tail
  const uint32_t* positions = nullptr;  // (len) original position of each row, increasing
  uint32_t len = 0;
  const float* k_tail = nullptr;                   // (len - split, D) or null: one segment
  const float* v_tail = nullptr;                   // (len - split, D)
  const uint32_t* positions_tail = nullptr;        // (len - split)
  uint32_t split = 0;                              // rows of the first segment when k_tail is set
  const kernels::KvQuantSegment* quant = nullptr;  // quantized rows before all of these, or null
  const float* kt = nullptr;  // rows [0, kt_rows)' keys transposed (KvSpan::kt), or null
  uint32_t kt_rows = 0;
  // (T of the append in progress) or null: the first row each new token sees (KvSpan::from). A
  // view that sets it carries a local layer's window by position itself, so the forward pass
  // gives its attention no window by rows (a composed cache, whose rows skip positions).
  const uint32_t* from = nullptr;
};

// Blocks of read-only rows a composed cache (cache/composed_cache.h) places at other positions
// than their keys were rotated for: for one layer, n × Hkv spans (kernels::AttentionArgs::parts)
// and each block's query rotation (n, 2, D/2). Valid until the cache changes.
struct CacheParts {
  const kernels::KvSpan* spans = nullptr;
  const float* rot = nullptr;
  uint32_t n = 0;
};

class AttentionCache {
 public:
  virtual ~AttentionCache() = default;

  virtual CacheShape shape() const = 0;
  // Position the next appended token gets (length of the uncompressed sequence).
  virtual uint32_t logical_length() const = 0;
  // Makes room to append T tokens to every layer and head. May reallocate (views taken before are
  // invalid afterwards). Throws Errc::out_of_memory or Errc::invalid_argument when it cannot.
  virtual void reserve_append(uint32_t T) = 0;
  // Appends T tokens at positions logical_length() .. logical_length()+T-1 to one layer.
  virtual void append(uint32_t layer, const float* k_new /* (T, Hkv, D) */,
                      const float* v_new /* (T, Hkv, D) */, uint32_t T) = 0;
  // Every layer has appended the same T tokens: logical_length() += T.
  virtual void commit_append(uint32_t T) = 0;
  // Current rows of one KV head of one layer, including rows appended but not yet committed.
  virtual KvHeadView view(uint32_t layer, uint32_t kv_head) const = 0;
  // Forgets every position >= length and any uncommitted append; length <= logical_length().
  virtual void rollback(uint32_t length) = 0;
  // Positions of the next T appended tokens (after reserve_append(T)): logical_length() + i,
  // except while a composed cache computes rows of its own inside the sequence.
  virtual void next_positions(uint32_t T, uint32_t* out) const;
  // The layer's blocks at shifted positions (composed caches); none by default.
  virtual CacheParts parts(uint32_t layer) const { return {}; }
};

// Dense cache: every position is a row, so row index == position. Storage per layer is one K and
// one V array of shape (Hkv, layer capacity, D); capacity grows geometrically on demand.
// A hybrid model's local (sliding-window) layer only ever reads its last window - 1 rows before a
// token. With trim_local_layers on, reserve_append drops a local layer's older rows (its first
// `pinned` rows stay), so a long prefill holds window-sized local layers: their views then hold the
// pinned rows and a tail of consecutive positions (KvHeadView::positions says which), and a
// rollback that would need dropped rows is refused. Global layers are never trimmed.
class KvCache final : public AttentionCache {
 public:
  explicit KvCache(CacheShape shape, uint32_t capacity = 0);
  explicit KvCache(const ModelConfig& cfg, uint32_t capacity = 0);

  CacheShape shape() const override { return shape_; }
  uint32_t logical_length() const override { return length_; }
  void reserve_append(uint32_t T) override;
  void append(uint32_t layer, const float* k_new, const float* v_new, uint32_t T) override;
  void commit_append(uint32_t T) override;
  KvHeadView view(uint32_t layer, uint32_t kv_head) const override;
  void rollback(uint32_t length) override;

  uint32_t capacity() const { return capacity_; }
  // Grows capacity to at least `capacity` positions per head (never shrinks). While local layers
  // are trimmed they get only what their window needs; a local layer that dropped rows gets the
  // rows `capacity` positions need past them.
  void reserve(uint32_t capacity);
  // Turns trimming of the local layers on (keeping their first `pinned` rows) or off. Needs a cache
  // made from a hybrid ModelConfig (else Errc::invalid_argument). Off again, the local layers keep
  // what they hold and grow by what is appended.
  void trim_local_layers(bool on, uint32_t pinned = 0);
  // Raw storage of one layer: (Hkv, layer_capacity(layer), D); rows [0, view().len) of each head
  // valid.
  const float* keys(uint32_t layer) const { return k_[layer].data(); }
  const float* values(uint32_t layer) const { return v_[layer].data(); }
  uint32_t layer_capacity(uint32_t layer) const { return cap_[layer]; }
  // Bytes of K and V held for the valid rows (2 · Σ rows · Hkv · D · 4).
  uint64_t bytes_used() const;
  // Keeps (on) or frees (off) a transposed copy of every head's keys, in the tiles CPU attention
  // reads (kernels::transpose_key_tiles, KvHeadView::kt), written as rows are appended. A step
  // over a long cache then reads its keys from there instead of transposing all of them again:
  // for `generate`, whose every answer token attends to the whole prompt. Costs about K's bytes
  // again (bytes_key_tiles). Not kept for a trimmed local layer once it has dropped rows.
  void keep_key_tiles(bool on);
  uint64_t bytes_key_tiles() const;

 private:
  void check_layer(uint32_t layer) const;
  uint32_t rows(uint32_t layer) const { return layer_len_[layer] - dropped_[layer]; }
  uint32_t trimmed_capacity(uint32_t capacity) const;
  // reserve(capacity); with size_dropped false (an append's geometric growth) the layers that
  // dropped rows are left to reserve_append, which grows them by their own rows.
  void grow(uint32_t capacity, bool size_dropped);
  void resize_layer(uint32_t layer, uint32_t capacity);  // keeps the rows; may throw out_of_memory
  void drop_old_rows(uint32_t layer);       // a trimmed local layer: to pinned + window - 1
  bool tiles_follow(uint32_t layer) const;  // its arrays grow with key tiles
  // Per head, the key tiles of layer_capacity(l) rows (kernels::key_tile_floats).
  size_t tile_stride(uint32_t capacity) const;
  // Copies rows [0, n) of every head's tiles from `from` (stride of capacity c_from) into `to`.
  void copy_tiles(const std::vector<float>& from, uint32_t c_from, std::vector<float>& to,
                  uint32_t c_to, uint32_t n) const;
  void write_tiles(uint32_t layer, const float* k_new, uint32_t r0, uint32_t T);

  CacheShape shape_;
  uint32_t capacity_ = 0;              // rows per head of the global (untrimmed) layers
  uint32_t length_ = 0;                // committed tokens
  std::vector<uint32_t> layer_len_;    // (L) positions per head incl. uncommitted appends
  std::vector<uint32_t> cap_;          // (L) rows per head each layer's arrays hold
  std::vector<uint32_t> dropped_;      // (L) positions a trimmed local layer dropped after pinned_
  std::vector<std::vector<float>> k_;  // L × (Hkv, cap_[l], D)
  std::vector<std::vector<float>> v_;  // L × (Hkv, cap_[l], D)
  bool key_tiles_ = false;
  std::vector<std::vector<float>> kt_;  // L × (Hkv, tile_stride(cap_[l])) when key_tiles_
  std::vector<uint32_t> positions_;     // (capacity) 0, 1, 2, ...: a dense row is its position
  std::vector<std::vector<uint32_t>>
      local_pos_;               // (L) a layer's row positions once it dropped rows
  std::vector<uint8_t> local_;  // (L) 1 = sliding-window layer (from a ModelConfig)
  uint32_t window_ = 0;
  bool trim_ = false;
  uint32_t pinned_ = 0;
};

}  // namespace kvzip::model
