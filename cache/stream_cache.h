// StreamKvCache: the cache of a document read with eviction as it goes (compress --stream). Each
// (layer, KV head) owns its own K, V and position arrays, so heads keep different numbers of rows
// and each array is sized to what its head holds plus the next chunk: after retain() drops rows, a
// head whose arrays are far larger than it needs gives the memory back (shrink). Peak memory thus
// follows the rows kept, not the document. Rows stay in increasing position; a head's view is one
// segment. take() turns the rows into the RaggedKvCache of a compressed document.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "cache/detail/page_allocator.h"
#include "cache/kv_cache.h"
#include "cache/ragged_cache.h"

namespace kvzip::model {

class StreamKvCache final : public AttentionCache {
 public:
  explicit StreamKvCache(CacheShape shape);

  CacheShape shape() const override { return shape_; }
  uint32_t logical_length() const override { return length_; }
  // Grows every head whose arrays lack room for T more rows (to its rows + T + an eighth).
  // Errc::out_of_memory with every row as it was.
  void reserve_append(uint32_t T) override;
  void append(uint32_t layer, const float* k_new, const float* v_new, uint32_t T) override;
  void commit_append(uint32_t T) override;
  KvHeadView view(uint32_t layer, uint32_t kv_head) const override;
  void rollback(uint32_t length) override;

  // Keeps only the listed rows of head (l, h) (strictly increasing indices < rows held), moving
  // them down. Errc::invalid_argument for an unsorted or out-of-range list. Between forward calls.
  void retain(uint32_t layer, uint32_t kv_head, std::span<const uint32_t> rows);
  // Gives back the memory of every head that holds more than twice what it needs for its rows
  // plus `spare` more (the next chunk).
  void shrink(uint32_t spare);

  uint32_t rows(uint32_t layer, uint32_t kv_head) const { return at(layer, kv_head).len; }
  uint64_t rows_total() const;
  // Rows' storage allocated over all heads (K, V and positions), in bytes.
  uint64_t bytes_allocated() const;

  // The rows as a compressed cache: every held row becomes a row of its compressed state, at
  // logical length logical_length(), with `room` append rows per head. Each head's arrays are
  // freed as soon as they are copied, so the rows exist twice only while being copied; this cache
  // is left empty. Errc::invalid_argument with an uncommitted append.
  RaggedKvCache take(uint32_t room);
  // Frees every head of `layer` (its rows are gone; for a caller that copied them elsewhere).
  void release(uint32_t layer);

 private:
  // Heads' arrays are mappings of their own (detail::PageAllocator): a long document grows and
  // shrinks them many times, and freed memory must leave the process, not stay in its heap.
  template <class T>
  using Array = std::vector<T, detail::PageAllocator<T>>;
  struct Head {
    Array<float> k, v;    // (capacity, D)
    Array<uint32_t> pos;  // (capacity)
    uint32_t len = 0;     // rows in use, uncommitted appends included
    uint32_t capacity() const { return static_cast<uint32_t>(pos.size()); }
  };
  Head& at(uint32_t l, uint32_t h) { return heads_[size_t(l) * shape_.n_kv_heads + h]; }
  const Head& at(uint32_t l, uint32_t h) const { return heads_[size_t(l) * shape_.n_kv_heads + h]; }
  void resize_head(Head& head, uint32_t capacity);

  CacheShape shape_;
  uint32_t length_ = 0;   // committed logical length
  uint32_t pending_ = 0;  // rows appended to a layer since the last commit
  std::vector<Head> heads_;
};

}  // namespace kvzip::model
