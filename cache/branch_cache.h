// BranchCache: one served request's view of a compressed document. It references a shared,
// read-only RaggedKvCache in its compressed state (the base: kept rows of every head) and owns only
// the rows appended after it (question and answer tokens) in a private dense tail. Nothing of the
// base is copied: every head's view has two segments, the base's kept rows then the tail's rows
// (KvHeadView::k_tail), which attention reads as one span (kernels/attention.h). Many branches
// may read one base at once from several threads, as long as nobody writes the base meanwhile.
// The base may also be a q8/q4 QuantBase (cache/quant_base.h), attended in place: then a head's
// view is [its f32 (f16-stored) rows ; the tail's rows] plus KvHeadView::quant for its quantized
// rows, so query sessions on q8/q4 files (loader/) and served requests share this one copy of the
// tail bookkeeping whatever the base's form.
// Invariants: logical_length() >= base length; rollback never reaches into the base.
#pragma once
#include <cstdint>
#include <vector>

#include "cache/kv_base.h"
#include "cache/kv_cache.h"
#include "cache/quant_base.h"
#include "cache/ragged_cache.h"

namespace kvzip::model {

class BranchCache final : public AttentionCache {
 public:
  // `base` must hold exactly its compressed state (no appended rows: Errc::invalid_argument
  // otherwise) and outlive this cache unchanged. `capacity` rows per head are reserved for the
  // tail up front (it grows on demand beyond).
  explicit BranchCache(const RaggedKvCache& base, uint32_t capacity = 0);
  // Over quantized rows; `base` must outlive this cache.
  explicit BranchCache(const QuantBase& base, uint32_t capacity = 0);
  // Over whichever form `base` holds.
  explicit BranchCache(const KvBase& base, uint32_t capacity = 0);

  CacheShape shape() const override { return tail_.shape(); }
  uint32_t logical_length() const override { return base_length_ + tail_.logical_length(); }
  void reserve_append(uint32_t T) override;
  void append(uint32_t layer, const float* k_new, const float* v_new, uint32_t T) override {
    tail_.append(layer, k_new, v_new, T);
  }
  void commit_append(uint32_t T) override { tail_.commit_append(T); }
  KvHeadView view(uint32_t layer, uint32_t kv_head) const override;
  // Forgets positions >= length; Errc::invalid_argument for a length below the base's (the base
  // is shared and read-only) or past logical_length().
  void rollback(uint32_t length) override;

  bool quantized() const { return quant_ != nullptr; }
  uint32_t base_length() const { return base_length_; }
  uint32_t tail_length() const { return tail_.logical_length(); }
  // Bytes this branch owns: its tail's K and V storage (2 · L · Hkv · capacity · D · 4).
  uint64_t bytes_owned() const;

 private:
  void sync_positions();  // tail_pos_ covers the tail's capacity

  const RaggedKvCache* base_ = nullptr;  // one of these two is set
  const QuantBase* quant_ = nullptr;
  uint32_t base_length_;
  KvCache tail_;                    // rows of the appended tokens; its row i is position base + i
  std::vector<uint32_t> tail_pos_;  // (tail capacity) base_length_ + i
};

}  // namespace kvzip::model
