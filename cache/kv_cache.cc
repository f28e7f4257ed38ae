// Dense KvCache: (Hkv, capacity, D) per layer, growth by reallocation with per-head copies,
// O(1) rollback by moving the length; trimmed local layers of hybrid models (kv_cache.h).
#include "cache/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <numeric>
#include <string>

#include "common/error.h"
#include "kernels/attention.h"

namespace kvzip::model {

void AttentionCache::next_positions(uint32_t T, uint32_t* out) const {
  for (uint32_t i = 0; i < T; ++i) out[i] = logical_length() + i;
}

CacheShape cache_shape(const ModelConfig& cfg) {
  return CacheShape{cfg.n_layers, cfg.n_kv_heads, cfg.head_dim};
}

KvCache::KvCache(CacheShape shape, uint32_t capacity)
    : shape_(shape),
      layer_len_(shape.n_layers, 0),
      cap_(shape.n_layers, 0),
      dropped_(shape.n_layers, 0),
      k_(shape.n_layers),
      v_(shape.n_layers),
      kt_(shape.n_layers),
      local_pos_(shape.n_layers) {
  if (shape.n_layers == 0 || shape.n_kv_heads == 0 || shape.head_dim == 0)
    throw Error(Errc::invalid_argument, "KvCache shape L=" + std::to_string(shape.n_layers) +
                                            " Hkv=" + std::to_string(shape.n_kv_heads) +
                                            " D=" + std::to_string(shape.head_dim) +
                                            ": every dimension must be > 0");
  reserve(capacity);
}

KvCache::KvCache(const ModelConfig& cfg, uint32_t capacity) : KvCache(cache_shape(cfg), 0) {
  if (cfg.hybrid() && cfg.sliding_window > 0) {
    local_ = cfg.local_layers;
    local_.resize(shape_.n_layers, 0);
    window_ = cfg.sliding_window;
  }
  reserve(capacity);
}

void KvCache::trim_local_layers(bool on, uint32_t pinned) {
  if (on && window_ == 0)
    throw Error(Errc::invalid_argument,
                "KvCache: trimming local layers needs a cache made from a hybrid model's config");
  trim_ = on;
  if (on) pinned_ = pinned;
}

// A trimmed local layer holds its pinned rows, the window - 1 rows any next token reads and room
// for a chunk of appends before the next drop.
uint32_t KvCache::trimmed_capacity(uint32_t capacity) const {
  return std::min<uint32_t>(capacity, pinned_ + 2 * window_);
}

void KvCache::resize_layer(uint32_t l, uint32_t capacity) {
  const size_t D = shape_.head_dim, H = shape_.n_kv_heads;
  std::vector<float> k_new, v_new, kt_new;
  try {
    k_new.resize(H * capacity * D);
    v_new.resize(H * capacity * D);
    if (tiles_follow(l)) kt_new.resize(H * tile_stride(capacity));
    if (dropped_[l]) local_pos_[l].resize(capacity);
  } catch (const std::bad_alloc&) {
    throw Error(Errc::out_of_memory,
                "KvCache: cannot grow to " + std::to_string(capacity) + " rows per head (" +
                    std::to_string((2 * H * capacity * D * sizeof(float)) >> 20) +
                    " MiB for one layer); use a shorter document or a machine with more memory");
  }
  const uint32_t n = std::min(rows(l), capacity);
  for (size_t h = 0; h < H && n; ++h) {
    std::memcpy(k_new.data() + h * capacity * D, k_[l].data() + h * cap_[l] * D,
                n * D * sizeof(float));
    std::memcpy(v_new.data() + h * capacity * D, v_[l].data() + h * cap_[l] * D,
                n * D * sizeof(float));
  }
  if (!kt_new.empty()) copy_tiles(kt_[l], cap_[l], kt_new, capacity, n);
  k_[l].swap(k_new);
  v_[l].swap(v_new);
  kt_[l].swap(kt_new);
  cap_[l] = capacity;
}

// A layer's tiles are kept while they hold every row: from keep_key_tiles, or from empty; a
// layer that dropped rows (and was rolled back to its pinned rows since) goes on without.
bool KvCache::tiles_follow(uint32_t l) const {
  return key_tiles_ && !dropped_[l] && (!kt_[l].empty() || rows(l) == 0);
}

size_t KvCache::tile_stride(uint32_t capacity) const {
  return kernels::key_tile_floats(capacity, shape_.head_dim);
}

void KvCache::copy_tiles(const std::vector<float>& from, uint32_t c_from, std::vector<float>& to,
                         uint32_t c_to, uint32_t n) const {
  // A tile's layout does not depend on the capacity: the first ceil(n / rows) tiles move whole.
  const size_t tiles = (size_t(n) + kernels::kKeyTileRows - 1) / kernels::kKeyTileRows;
  const size_t floats = tiles * shape_.head_dim * kernels::kKeyTileRows;
  if (floats == 0 || from.empty()) return;
  for (size_t h = 0; h < shape_.n_kv_heads; ++h)
    std::memcpy(to.data() + h * tile_stride(c_to), from.data() + h * tile_stride(c_from),
                floats * sizeof(float));
}

void KvCache::write_tiles(uint32_t l, const float* k_new, uint32_t r0, uint32_t T) {
  const size_t D = shape_.head_dim, H = shape_.n_kv_heads, B = kernels::kKeyTileRows;
  const size_t stride = tile_stride(cap_[l]);
  for (size_t h = 0; h < H; ++h) {
    float* tiles = kt_[l].data() + h * stride;
    for (uint32_t t = 0; t < T; ++t) {
      const size_t r = size_t(r0) + t;
      float* col = tiles + (r / B) * D * B + r % B;  // tile r / B, column r % B: (D, B) row-major
      const float* src = k_new + (size_t(t) * H + h) * D;
      for (size_t d = 0; d < D; ++d) col[d * B] = src[d];
    }
  }
}

void KvCache::keep_key_tiles(bool on) {
  if (on == key_tiles_) return;
  if (!on) {
    key_tiles_ = false;
    for (std::vector<float>& t : kt_) std::vector<float>().swap(t);
    return;
  }
  const size_t D = shape_.head_dim, H = shape_.n_kv_heads;
  std::vector<std::vector<float>> made(shape_.n_layers);
  try {
    for (uint32_t l = 0; l < shape_.n_layers; ++l)
      if (!dropped_[l]) made[l].resize(H * tile_stride(cap_[l]));
  } catch (const std::bad_alloc&) {
    throw Error(Errc::out_of_memory, "KvCache: no memory for the key tiles (about the keys' " +
                                         std::to_string(bytes_used() / 2 >> 20) + " MiB again)");
  }
  for (uint32_t l = 0; l < shape_.n_layers; ++l) {
    if (dropped_[l]) continue;
    for (size_t h = 0; h < H; ++h)
      kernels::cpu::transpose_key_tiles(k_[l].data() + h * cap_[l] * D, rows(l), uint32_t(D),
                                        made[l].data() + h * tile_stride(cap_[l]));
    kt_[l].swap(made[l]);
  }
  key_tiles_ = true;
}

uint64_t KvCache::bytes_key_tiles() const {
  uint64_t r = 0;
  for (const std::vector<float>& t : kt_) r += t.size() * sizeof(float);
  return r;
}

void KvCache::reserve(uint32_t capacity) { grow(capacity, true); }

void KvCache::grow(uint32_t capacity, bool size_dropped) {
  if (capacity <= capacity_) return;
  const size_t D = shape_.head_dim, H = shape_.n_kv_heads;
  // Every new array is allocated before any is swapped in, so a failure leaves the cache intact.
  std::vector<uint32_t> want(shape_.n_layers);
  std::vector<std::vector<float>> k_new(shape_.n_layers), v_new(shape_.n_layers),
      kt_new(shape_.n_layers);
  try {
    for (uint32_t l = 0; l < shape_.n_layers; ++l) {
      const bool local = local_.size() && local_[l];
      if (local && trim_) want[l] = std::max(cap_[l], trimmed_capacity(capacity));
      else if (dropped_[l])  // its rows are positions past the dropped ones
        want[l] = size_dropped ? std::max(cap_[l], capacity - dropped_[l]) : cap_[l];
      else want[l] = capacity;
      if (want[l] <= cap_[l]) continue;
      k_new[l].resize(H * want[l] * D);
      v_new[l].resize(H * want[l] * D);
      if (tiles_follow(l)) kt_new[l].resize(H * tile_stride(want[l]));
    }
  } catch (const std::bad_alloc&) {
    throw Error(Errc::out_of_memory,
                "KvCache: cannot grow to " + std::to_string(capacity) + " rows per head (" +
                    std::to_string((2 * shape_.n_layers * H * capacity * D * sizeof(float)) >> 20) +
                    " MiB); use a shorter document or a machine with more memory");
  }
  for (uint32_t l = 0; l < shape_.n_layers; ++l) {
    if (want[l] <= cap_[l]) continue;
    for (size_t h = 0; h < H && rows(l); ++h) {
      const size_t bytes = size_t(rows(l)) * D * sizeof(float);
      std::memcpy(k_new[l].data() + h * want[l] * D, k_[l].data() + h * cap_[l] * D, bytes);
      std::memcpy(v_new[l].data() + h * want[l] * D, v_[l].data() + h * cap_[l] * D, bytes);
    }
    if (!kt_new[l].empty()) copy_tiles(kt_[l], cap_[l], kt_new[l], want[l], rows(l));
    k_[l].swap(k_new[l]);
    v_[l].swap(v_new[l]);
    kt_[l].swap(kt_new[l]);
    cap_[l] = want[l];
    if (dropped_[l]) local_pos_[l].resize(want[l]);
  }
  positions_.resize(capacity);
  std::iota(positions_.begin(), positions_.end(), 0u);
  capacity_ = capacity;
}

void KvCache::drop_old_rows(uint32_t l) {
  const uint32_t first = pinned_ + dropped_[l];  // position of the first tail row
  if (length_ < window_ || length_ - (window_ - 1) <= first) return;
  const uint32_t keep_from = length_ - (window_ - 1);  // positions before it are never read again
  const uint32_t from_row = pinned_ + (keep_from - first), n = rows(l) - from_row;
  const size_t D = shape_.head_dim, H = shape_.n_kv_heads;
  for (size_t h = 0; h < H; ++h) {
    float* k = k_[l].data() + h * cap_[l] * D;
    float* v = v_[l].data() + h * cap_[l] * D;
    std::memmove(k + size_t(pinned_) * D, k + size_t(from_row) * D, size_t(n) * D * sizeof(float));
    std::memmove(v + size_t(pinned_) * D, v + size_t(from_row) * D, size_t(n) * D * sizeof(float));
  }
  dropped_[l] = keep_from - pinned_;
  std::vector<float>().swap(kt_[l]);  // the rows moved: its tiles are not kept from here on
  std::vector<uint32_t>& pos = local_pos_[l];
  pos.resize(cap_[l]);
  std::iota(pos.begin(), pos.begin() + pinned_, 0u);
  std::iota(pos.begin() + pinned_, pos.begin() + pinned_ + n, keep_from);
}

void KvCache::reserve_append(uint32_t T) {
  uint64_t need = uint64_t(length_) + T;
  if (need > UINT32_MAX)
    throw Error(Errc::invalid_argument, "KvCache: appending " + std::to_string(T) + " tokens to " +
                                            std::to_string(length_) + " exceeds 2^32 positions");
  for (uint32_t l = 0; l < shape_.n_layers; ++l) KVZIP_ASSERT(layer_len_[l] == length_);
  if (need > capacity_) {
    uint64_t grown = std::max<uint64_t>({need, uint64_t(capacity_) * 3 / 2, 256});
    grow(static_cast<uint32_t>(std::min<uint64_t>(grown, UINT32_MAX)), false);
  }
  // Layers whose rows differ from positions (trimmed local layers) make room on their own, by
  // their own rows: sized from the global capacity, a local layer that dropped the rows of a long
  // document would be as large as a global one again.
  for (uint32_t l = 0; l < shape_.n_layers; ++l) {
    if (uint64_t(rows(l)) + T <= cap_[l]) continue;
    if (trim_ && local_.size() && local_[l]) drop_old_rows(l);
    if (uint64_t(rows(l)) + T > cap_[l])
      resize_layer(l, static_cast<uint32_t>(
                          std::max<uint64_t>(uint64_t(rows(l)) + T, uint64_t(cap_[l]) * 3 / 2)));
  }
}

void KvCache::check_layer(uint32_t layer) const { KVZIP_ASSERT(layer < shape_.n_layers); }

void KvCache::append(uint32_t layer, const float* k_new, const float* v_new, uint32_t T) {
  check_layer(layer);
  const uint32_t r0 = rows(layer);
  KVZIP_ASSERT(layer_len_[layer] == length_ && uint64_t(r0) + T <= cap_[layer]);
  const size_t D = shape_.head_dim, H = shape_.n_kv_heads, cap = cap_[layer];
  float* k = k_[layer].data();
  float* v = v_[layer].data();
  for (uint32_t t = 0; t < T; ++t) {
    for (size_t h = 0; h < H; ++h) {
      size_t dst = (h * cap + r0 + t) * D, src = (size_t(t) * H + h) * D;
      std::memcpy(k + dst, k_new + src, D * sizeof(float));
      std::memcpy(v + dst, v_new + src, D * sizeof(float));
    }
  }
  if (!kt_[layer].empty()) write_tiles(layer, k_new, r0, T);
  if (dropped_[layer])
    for (uint32_t t = 0; t < T; ++t) local_pos_[layer][r0 + t] = length_ + t;
  layer_len_[layer] = length_ + T;
}

void KvCache::commit_append(uint32_t T) {
  for (uint32_t l = 0; l < shape_.n_layers; ++l) KVZIP_ASSERT(layer_len_[l] == length_ + T);
  length_ += T;
}

KvHeadView KvCache::view(uint32_t layer, uint32_t kv_head) const {
  check_layer(layer);
  KVZIP_ASSERT(kv_head < shape_.n_kv_heads);
  const size_t off = size_t(kv_head) * cap_[layer] * shape_.head_dim;
  const uint32_t* pos = dropped_[layer] ? local_pos_[layer].data() : positions_.data();
  KvHeadView v{k_[layer].data() + off, v_[layer].data() + off, pos, rows(layer)};
  if (!kt_[layer].empty()) {
    v.kt = kt_[layer].data() + kv_head * tile_stride(cap_[layer]);
    v.kt_rows = v.len;
  }
  return v;
}

void KvCache::rollback(uint32_t length) {
  if (length > length_)
    throw Error(Errc::invalid_argument, "KvCache: cannot roll back to length " +
                                            std::to_string(length) + ", the cache holds only " +
                                            std::to_string(length_) + " tokens");
  for (uint32_t l = 0; l < shape_.n_layers; ++l) {
    if (!dropped_[l] || length <= pinned_) continue;
    // The rows a token at `length` would read must still be there.
    if (uint64_t(length) < uint64_t(pinned_) + dropped_[l] + (window_ - 1))
      throw Error(Errc::invalid_argument,
                  "KvCache: cannot roll back to length " + std::to_string(length) +
                      ": local layer " + std::to_string(l) + " dropped the rows before position " +
                      std::to_string(pinned_ + dropped_[l]) + " while trimming to its window");
  }
  for (uint32_t l = 0; l < shape_.n_layers; ++l)
    if (dropped_[l] && length <= pinned_) dropped_[l] = 0;
  length_ = length;
  std::fill(layer_len_.begin(), layer_len_.end(), length);
}

uint64_t KvCache::bytes_used() const {
  uint64_t r = 0;
  for (uint32_t l = 0; l < shape_.n_layers; ++l) r += rows(l);
  return 2ull * r * shape_.n_kv_heads * shape_.head_dim * sizeof(float);
}

}  // namespace kvzip::model
