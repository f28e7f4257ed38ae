// RaggedKvCache: the compressed cache on the host. Per layer and KV head a variable number of kept
// rows (post-RoPE K, V and the original position of each row, in increasing position), followed
// by append room for question/answer tokens. Layout, growth, appends and rollback are kept by
// RaggedLayout (cache/ragged_layout.h), which GpuCache shares: per layer one contiguous K and one
// V array, head-major. logical_length() continues from the uncompressed sequence length, never
// from the kept count. The compressed state (base) is restored by reset() in O(L·Hkv) with no
// data copied. retain() compacts one head in place (bounded generation, model/rkv.h): rows stay in
// increasing position, so rollback/reset keep working; dropping base rows shrinks the base for
// good.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "cache/kv_cache.h"
#include "cache/ragged_layout.h"

namespace kvzip::model {

class RaggedKvCache final : public AttentionCache {
 public:
  // A cache whose head (l, h) holds kept[l * Hkv + h] rows, to be filled through the mutable
  // accessors below, at logical length `logical_length` (the uncompressed sequence length), with
  // `room` rows of append room per head (grown on demand).
  RaggedKvCache(CacheShape shape, uint32_t logical_length, const std::vector<uint32_t>& kept,
                uint32_t room = 256);

  // Keeps, for each (l, h), the positions listed in keep[l * Hkv + h] (ascending, <
  // dense.logical_length(); a row index of the dense cache, except in a trimmed local layer, whose
  // view's positions locate them). Throws Errc::invalid_argument for unsorted or out-of-range
  // positions, or one a trimmed layer no longer holds.
  static RaggedKvCache from_dense(const KvCache& dense,
                                  const std::vector<std::vector<uint32_t>>& keep,
                                  uint32_t room = 256);

  CacheShape shape() const override { return layout_.shape(); }
  uint32_t logical_length() const override { return layout_.logical_length(); }
  void reserve_append(uint32_t T) override;
  void append(uint32_t layer, const float* k_new, const float* v_new, uint32_t T) override;
  void commit_append(uint32_t T) override;
  KvHeadView view(uint32_t layer, uint32_t kv_head) const override;
  void rollback(uint32_t length) override;

  // Keeps only the listed rows of head (l, h) (strictly increasing indices < view(l, h).len),
  // moving them down in place; positions move with them. kept(l, h) becomes the number of listed
  // rows that were base rows: evicting only appended rows leaves the compressed state (reset())
  // intact, evicting base rows removes them from it too (take a copy first to undo that). Call
  // between forward calls, never with an uncommitted append. Throws Errc::invalid_argument for an
  // unsorted or out-of-range list.
  void retain(uint32_t layer, uint32_t kv_head, std::span<const uint32_t> rows);

  // Back to the compressed state: every appended row is forgotten.
  void reset() { rollback(layout_.base_length()); }
  // Logical length of the compressed state (the uncompressed document length).
  uint32_t base_length() const { return layout_.base_length(); }
  // The bookkeeping (GpuCache::from_ragged copies the compressed state through it).
  const RaggedLayout& layout() const { return layout_; }

  uint32_t kept(uint32_t layer, uint32_t kv_head) const { return layout_.kept(layer, kv_head); }
  uint64_t kept_total() const { return layout_.kept_total(); }  // Σ kept rows over (l, h)
  // Rows of the compressed state of head (l, h), for filling or reading: (kept, D) / (kept).
  // The mutable k_rows drops the key tiles (make_key_tiles), which could go stale through it.
  float* k_rows(uint32_t layer, uint32_t kv_head);
  float* v_rows(uint32_t layer, uint32_t kv_head);
  uint32_t* positions(uint32_t layer, uint32_t kv_head);
  const float* k_rows(uint32_t layer, uint32_t kv_head) const;
  const float* v_rows(uint32_t layer, uint32_t kv_head) const;
  const uint32_t* positions(uint32_t layer, uint32_t kv_head) const;
  // Bytes of K and V in the compressed state (2 · Σ kept · D · 4).
  uint64_t bytes_kept() const;

  // Keeps the compressed state's keys also transposed, as the CPU attention reads them
  // (KvSpan::kt), so decode calls over this read-only base stop transposing them per call; views
  // then carry them. Costs about the K bytes again (bytes_key_tiles). Anything that may change the
  // kept rows (retain, the mutable k_rows) drops them.
  void make_key_tiles();
  uint64_t bytes_key_tiles() const { return kt_.size() * sizeof(float); }

 private:
  const float* key_tiles(uint32_t layer, uint32_t kv_head) const;

  RaggedLayout layout_;
  std::vector<std::vector<float>> k_;  // L × (Σ_h (kept_h + room), D)
  std::vector<std::vector<float>> v_;  // L × (Σ_h (kept_h + room), D)
  std::vector<float> kt_;              // key tiles of every (l, h) or empty; head (l, h) at kt_off_
  std::vector<size_t> kt_off_;         // (L · Hkv)
};

}  // namespace kvzip::model
