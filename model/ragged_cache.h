// RaggedKvCache: the compressed cache. Per layer and KV head a variable number of kept rows
// (post-RoPE K, V and the original position of each row, in increasing position), followed by
// append room for question/answer tokens. Per layer one contiguous K and one V array, head-major:
// head h occupies rows [offset(l,h), offset(l,h) + capacity(l,h)) and uses the first len of them.
// logical_length() continues from the uncompressed sequence length, never from the kept count.
// The compressed state (base) is restored by reset() in O(L·Hkv) with no data copied.
// retain() compacts one head in place (bounded generation, model/rkv.h): rows stay in increasing
// position, so rollback/reset keep working; dropping base rows shrinks the base for good.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "model/kv_cache.h"

namespace kvzip {

class RaggedKvCache final : public AttentionCache {
 public:
  // A cache whose head (l, h) holds kept[l * Hkv + h] rows, to be filled through the mutable
  // accessors below, at logical length `logical_length` (the uncompressed sequence length), with
  // `room` rows of append room per head (grown on demand).
  RaggedKvCache(CacheShape shape, uint32_t logical_length, const std::vector<uint32_t>& kept,
                uint32_t room = 256);

  // Keeps, for each (l, h), the dense rows listed in keep[l * Hkv + h] (ascending row indices
  // < dense.logical_length()). Throws Errc::invalid_argument for unsorted or out-of-range rows.
  static RaggedKvCache from_dense(const KvCache& dense,
                                  const std::vector<std::vector<uint32_t>>& keep,
                                  uint32_t room = 256);

  CacheShape shape() const override { return shape_; }
  uint32_t logical_length() const override { return length_; }
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
  void reset() { rollback(base_length_); }
  // Logical length of the compressed state (the uncompressed document length).
  uint32_t base_length() const { return base_length_; }

  uint32_t kept(uint32_t layer, uint32_t kv_head) const { return kept_[idx(layer, kv_head)]; }
  uint64_t kept_total() const;  // Σ kept rows over (l, h)
  // Rows of the compressed state of head (l, h), for filling or reading: (kept, D) / (kept).
  float* k_rows(uint32_t layer, uint32_t kv_head);
  float* v_rows(uint32_t layer, uint32_t kv_head);
  uint32_t* positions(uint32_t layer, uint32_t kv_head);
  const float* k_rows(uint32_t layer, uint32_t kv_head) const;
  const float* v_rows(uint32_t layer, uint32_t kv_head) const;
  const uint32_t* positions(uint32_t layer, uint32_t kv_head) const;
  // Bytes of K and V in the compressed state (2 · Σ kept · D · 4).
  uint64_t bytes_kept() const;

 private:
  size_t idx(uint32_t l, uint32_t h) const { return size_t(l) * shape_.n_kv_heads + h; }
  void relayout(uint32_t room);  // reallocates every layer with `room` rows free per head

  CacheShape shape_;
  uint32_t length_ = 0;       // logical length (committed)
  uint32_t base_length_ = 0;  // logical length of the compressed state
  uint32_t room_ = 0;         // append rows per head
  std::vector<uint32_t> kept_;    // (L, Hkv) rows of the compressed state
  std::vector<uint32_t> len_;     // (L, Hkv) rows in use incl. uncommitted appends
  std::vector<uint64_t> offset_;  // (L, Hkv) first row of each head in its layer's arrays
  std::vector<std::vector<float>> k_;           // L × (Σ_h (kept_h + room), D)
  std::vector<std::vector<float>> v_;           // L × (Σ_h (kept_h + room), D)
  std::vector<std::vector<uint32_t>> pos_;      // L × (Σ_h (kept_h + room))
};

}  // namespace kvzip
