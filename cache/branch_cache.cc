// BranchCache: the shared base's kept rows plus a private dense tail (see branch_cache.h).
#include "cache/branch_cache.h"

#include <numeric>
#include <string>

#include "common/error.h"

namespace kvzip::model {
namespace {

const RaggedKvCache& checked_base(const RaggedKvCache& base) {
  if (base.logical_length() != base.base_length())
    throw Error(Errc::invalid_argument,
                "BranchCache: the shared base holds appended rows (logical length " +
                    std::to_string(base.logical_length()) + ", compressed state " +
                    std::to_string(base.base_length()) + "); reset() it first");
  return base;
}

}  // namespace

BranchCache::BranchCache(const RaggedKvCache& base, uint32_t capacity)
    : base_(&checked_base(base)), base_length_(base.base_length()), tail_(base.shape(), capacity) {
  sync_positions();
}

BranchCache::BranchCache(const QuantBase& base, uint32_t capacity)
    : quant_(&base), base_length_(base.base_length()), tail_(base.shape(), capacity) {
  sync_positions();
}

static BranchCache over(const KvBase& base, uint32_t capacity) {
  return base.quantized() ? BranchCache(base.quant(), capacity)
                          : BranchCache(base.f32("BranchCache"), capacity);
}

BranchCache::BranchCache(const KvBase& base, uint32_t capacity)
    : BranchCache(over(base, capacity)) {}

void BranchCache::sync_positions() {
  if (tail_pos_.size() == tail_.capacity()) return;
  tail_pos_.resize(tail_.capacity());
  std::iota(tail_pos_.begin(), tail_pos_.end(), base_length_);
}

void BranchCache::reserve_append(uint32_t T) {
  if (uint64_t(logical_length()) + T > UINT32_MAX)
    throw Error(Errc::invalid_argument, "BranchCache: appending " + std::to_string(T) +
                                            " tokens to " + std::to_string(logical_length()) +
                                            " exceeds 2^32 positions");
  tail_.reserve_append(T);
  sync_positions();
}

KvHeadView BranchCache::view(uint32_t layer, uint32_t kv_head) const {
  const KvHeadView t = tail_.view(layer, kv_head);
  // The base's f32 rows: all its kept rows, or the f16-stored rows of a quantized base.
  const uint32_t kept = quant_ ? quant_->dense(layer, kv_head) : base_->kept(layer, kv_head);
  const kernels::KvQuantSegment* quant = quant_ ? quant_->quant(layer, kv_head) : nullptr;
  if (kept == 0) {
    KvHeadView v{t.k, t.v, tail_pos_.data(), t.len};
    v.quant = quant;
    return v;
  }
  KvHeadView v;
  v.k = quant_ ? quant_->dense_k(layer, kv_head) : base_->k_rows(layer, kv_head);
  v.v = quant_ ? quant_->dense_v(layer, kv_head) : base_->v_rows(layer, kv_head);
  v.positions = quant_ ? quant_->positions(layer, kv_head) : base_->positions(layer, kv_head);
  v.quant = quant;
  if (base_) {  // the base's key tiles, when it keeps them (RaggedKvCache::make_key_tiles)
    const KvHeadView b = base_->view(layer, kv_head);
    v.kt = b.kt;
    v.kt_rows = b.kt_rows;
  }
  v.len = kept + t.len;
  if (t.len > 0) {
    v.k_tail = t.k;
    v.v_tail = t.v;
    v.positions_tail = tail_pos_.data();
    v.split = kept;
  }
  return v;
}

void BranchCache::rollback(uint32_t length) {
  if (length < base_length_)
    throw Error(Errc::invalid_argument,
                "BranchCache: cannot roll back to length " + std::to_string(length) +
                    ", below the shared compressed state's " + std::to_string(base_length_));
  tail_.rollback(length - base_length_);
}

uint64_t BranchCache::bytes_owned() const {
  const CacheShape s = tail_.shape();
  return 2ull * s.n_layers * s.n_kv_heads * tail_.capacity() * s.head_dim * sizeof(float);
}

}  // namespace kvzip::model
