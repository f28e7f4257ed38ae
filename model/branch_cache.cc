// BranchCache: the shared base's kept rows plus a private dense tail (see branch_cache.h).
#include "model/branch_cache.h"

#include <numeric>
#include <string>

#include "common/error.h"

namespace kvzip {
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
  const uint32_t kept = base_->kept(layer, kv_head);
  if (kept == 0) return KvHeadView{t.k, t.v, tail_pos_.data(), t.len};
  KvHeadView v;
  v.k = base_->k_rows(layer, kv_head);
  v.v = base_->v_rows(layer, kv_head);
  v.positions = base_->positions(layer, kv_head);
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

}  // namespace kvzip
