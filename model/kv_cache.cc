// Dense KvCache: (Hkv, capacity, D) per layer, growth by reallocation with per-head copies,
// O(1) rollback by moving the length.
#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <numeric>
#include <string>

#include "common/error.h"

namespace kvzip::model {

void AttentionCache::next_positions(uint32_t T, uint32_t* out) const {
  for (uint32_t i = 0; i < T; ++i) out[i] = logical_length() + i;
}

CacheShape cache_shape(const ModelConfig& cfg) {
  return CacheShape{cfg.n_layers, cfg.n_kv_heads, cfg.head_dim};
}

KvCache::KvCache(CacheShape shape, uint32_t capacity)
    : shape_(shape), layer_len_(shape.n_layers, 0), k_(shape.n_layers), v_(shape.n_layers) {
  if (shape.n_layers == 0 || shape.n_kv_heads == 0 || shape.head_dim == 0)
    throw Error(Errc::invalid_argument,
                "KvCache shape L=" + std::to_string(shape.n_layers) + " Hkv=" +
                    std::to_string(shape.n_kv_heads) + " D=" + std::to_string(shape.head_dim) +
                    ": every dimension must be > 0");
  reserve(capacity);
}

void KvCache::reserve(uint32_t capacity) {
  if (capacity <= capacity_) return;
  const size_t D = shape_.head_dim, H = shape_.n_kv_heads;
  // All new arrays are allocated before any is swapped in, so a failure leaves the cache intact.
  std::vector<std::vector<float>> k_new(shape_.n_layers), v_new(shape_.n_layers);
  try {
    for (uint32_t l = 0; l < shape_.n_layers; ++l) {
      k_new[l].resize(H * capacity * D);
      v_new[l].resize(H * capacity * D);
    }
  } catch (const std::bad_alloc&) {
    throw Error(Errc::out_of_memory,
                "KvCache: cannot grow to " + std::to_string(capacity) + " rows per head (" +
                    std::to_string((2 * shape_.n_layers * H * capacity * D * sizeof(float)) >> 20) +
                    " MiB); use a shorter document or a machine with more memory");
  }
  for (uint32_t l = 0; l < shape_.n_layers; ++l) {
    if (layer_len_[l] == 0) continue;  // nothing to copy (and the old arrays may be empty)
    for (size_t h = 0; h < H; ++h) {
      const size_t rows = size_t(layer_len_[l]) * D * sizeof(float);
      std::memcpy(k_new[l].data() + h * capacity * D, k_[l].data() + h * capacity_ * D, rows);
      std::memcpy(v_new[l].data() + h * capacity * D, v_[l].data() + h * capacity_ * D, rows);
    }
  }
  k_.swap(k_new);
  v_.swap(v_new);
  positions_.resize(capacity);
  std::iota(positions_.begin(), positions_.end(), 0u);
  capacity_ = capacity;
}

void KvCache::reserve_append(uint32_t T) {
  uint64_t need = uint64_t(length_) + T;
  if (need > UINT32_MAX)
    throw Error(Errc::invalid_argument, "KvCache: appending " + std::to_string(T) + " tokens to " +
                                            std::to_string(length_) + " exceeds 2^32 positions");
  if (need <= capacity_) return;
  for (uint32_t l = 0; l < shape_.n_layers; ++l) KVZIP_ASSERT(layer_len_[l] == length_);
  uint64_t grown = std::max<uint64_t>({need, uint64_t(capacity_) * 3 / 2, 256});
  reserve(static_cast<uint32_t>(std::min<uint64_t>(grown, UINT32_MAX)));
}

void KvCache::check_layer(uint32_t layer) const { KVZIP_ASSERT(layer < shape_.n_layers); }

void KvCache::append(uint32_t layer, const float* k_new, const float* v_new, uint32_t T) {
  check_layer(layer);
  KVZIP_ASSERT(layer_len_[layer] == length_ && uint64_t(length_) + T <= capacity_);
  const size_t D = shape_.head_dim, H = shape_.n_kv_heads;
  float* k = k_[layer].data();
  float* v = v_[layer].data();
  for (uint32_t t = 0; t < T; ++t) {
    for (size_t h = 0; h < H; ++h) {
      size_t dst = (h * capacity_ + length_ + t) * D, src = (size_t(t) * H + h) * D;
      std::memcpy(k + dst, k_new + src, D * sizeof(float));
      std::memcpy(v + dst, v_new + src, D * sizeof(float));
    }
  }
  layer_len_[layer] = length_ + T;
}

void KvCache::commit_append(uint32_t T) {
  for (uint32_t l = 0; l < shape_.n_layers; ++l) KVZIP_ASSERT(layer_len_[l] == length_ + T);
  length_ += T;
}

KvHeadView KvCache::view(uint32_t layer, uint32_t kv_head) const {
  check_layer(layer);
  KVZIP_ASSERT(kv_head < shape_.n_kv_heads);
  const size_t off = size_t(kv_head) * capacity_ * shape_.head_dim;
  return KvHeadView{k_[layer].data() + off, v_[layer].data() + off, positions_.data(),
                    layer_len_[layer]};
}

void KvCache::rollback(uint32_t length) {
  if (length > length_)
    throw Error(Errc::invalid_argument, "KvCache: cannot roll back to length " +
                                            std::to_string(length) + ", the cache holds only " +
                                            std::to_string(length_) + " tokens");
  length_ = length;
  std::fill(layer_len_.begin(), layer_len_.end(), length);
}

uint64_t KvCache::bytes_used() const {
  return 2ull * shape_.n_layers * shape_.n_kv_heads * length_ * shape_.head_dim * sizeof(float);
}

}  // namespace kvzip::model
