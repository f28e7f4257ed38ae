// RaggedKvCache (see ragged_cache.h). Appends write after each head's used rows; rollback finds,
// per head, the first row at or past the target position by binary search (rows are in increasing
// position), so it moves lengths only. Growth re-lays out all heads with a larger room.
#include "model/ragged_cache.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <string>

#include "common/error.h"

namespace kvzip {

RaggedKvCache::RaggedKvCache(CacheShape shape, uint32_t logical_length,
                             const std::vector<uint32_t>& kept, uint32_t room)
    : shape_(shape), length_(logical_length), base_length_(logical_length), kept_(kept) {
  if (shape.n_layers == 0 || shape.n_kv_heads == 0 || shape.head_dim == 0)
    throw Error(Errc::invalid_argument, "RaggedKvCache: every dimension must be > 0");
  if (kept.size() != size_t(shape.n_layers) * shape.n_kv_heads)
    throw Error(Errc::invalid_argument,
                "RaggedKvCache: " + std::to_string(kept.size()) + " row counts for L·Hkv = " +
                    std::to_string(size_t(shape.n_layers) * shape.n_kv_heads) + " heads");
  for (uint32_t n : kept)
    if (n > logical_length)
      throw Error(Errc::invalid_argument, "RaggedKvCache: a head keeps " + std::to_string(n) +
                                              " rows of a sequence of " +
                                              std::to_string(logical_length));
  len_ = kept_;
  offset_.assign(kept_.size(), 0);
  k_.resize(shape.n_layers);
  v_.resize(shape.n_layers);
  pos_.resize(shape.n_layers);
  relayout(room);
}

void RaggedKvCache::relayout(uint32_t room) {
  const size_t D = shape_.head_dim, H = shape_.n_kv_heads;
  std::vector<std::vector<float>> k_new(shape_.n_layers), v_new(shape_.n_layers);
  std::vector<std::vector<uint32_t>> p_new(shape_.n_layers);
  std::vector<uint64_t> off_new(offset_.size());
  try {
    for (uint32_t l = 0; l < shape_.n_layers; ++l) {
      uint64_t rows = 0;
      for (size_t h = 0; h < H; ++h) {
        off_new[idx(l, h)] = rows;
        rows += uint64_t(kept_[idx(l, h)]) + room;
      }
      k_new[l].resize(rows * D);
      v_new[l].resize(rows * D);
      p_new[l].resize(rows);
    }
  } catch (const std::bad_alloc&) {
    throw Error(Errc::out_of_memory, "RaggedKvCache: cannot allocate " + std::to_string(room) +
                                         " rows of append room per head");
  }
  for (uint32_t l = 0; l < shape_.n_layers; ++l) {
    if (k_[l].empty()) continue;  // first layout: nothing to move
    for (size_t h = 0; h < H; ++h) {
      const size_t i = idx(l, h), n = len_[i];
      std::memcpy(k_new[l].data() + off_new[i] * D, k_[l].data() + offset_[i] * D, n * D * 4);
      std::memcpy(v_new[l].data() + off_new[i] * D, v_[l].data() + offset_[i] * D, n * D * 4);
      std::memcpy(p_new[l].data() + off_new[i], pos_[l].data() + offset_[i], n * 4);
    }
  }
  k_.swap(k_new);
  v_.swap(v_new);
  pos_.swap(p_new);
  offset_.swap(off_new);
  room_ = room;
}

RaggedKvCache RaggedKvCache::from_dense(const KvCache& dense,
                                        const std::vector<std::vector<uint32_t>>& keep,
                                        uint32_t room) {
  const CacheShape s = dense.shape();
  const uint32_t T = dense.logical_length();
  if (keep.size() != size_t(s.n_layers) * s.n_kv_heads)
    throw Error(Errc::invalid_argument, "RaggedKvCache::from_dense: wrong number of keep lists");
  std::vector<uint32_t> kept(keep.size());
  for (size_t i = 0; i < keep.size(); ++i) {
    for (size_t j = 0; j < keep[i].size(); ++j)
      if (keep[i][j] >= T || (j > 0 && keep[i][j] <= keep[i][j - 1]))
        throw Error(Errc::invalid_argument,
                    "RaggedKvCache::from_dense: keep list " + std::to_string(i) +
                        " is not strictly increasing within [0, " + std::to_string(T) + ")");
    kept[i] = static_cast<uint32_t>(keep[i].size());
  }
  RaggedKvCache r(s, T, kept, room);
  const size_t D = s.head_dim;
  for (uint32_t l = 0; l < s.n_layers; ++l)
    for (uint32_t h = 0; h < s.n_kv_heads; ++h) {
      const KvHeadView src = dense.view(l, h);
      const auto& rows = keep[r.idx(l, h)];
      float* k = r.k_rows(l, h);
      float* v = r.v_rows(l, h);
      uint32_t* p = r.positions(l, h);
      for (size_t j = 0; j < rows.size(); ++j) {
        std::memcpy(k + j * D, src.k + size_t(rows[j]) * D, D * 4);
        std::memcpy(v + j * D, src.v + size_t(rows[j]) * D, D * 4);
        p[j] = src.positions[rows[j]];
      }
    }
  return r;
}

void RaggedKvCache::reserve_append(uint32_t T) {
  if (uint64_t(length_) + T > UINT32_MAX)
    throw Error(Errc::invalid_argument, "RaggedKvCache: appending exceeds 2^32 positions");
  uint32_t need = 0;  // largest number of rows any head appends beyond its kept rows
  for (size_t i = 0; i < len_.size(); ++i) need = std::max(need, len_[i] - kept_[i] + T);
  if (need <= room_) return;
  relayout(std::max<uint32_t>(need, room_ + room_ / 2));
}

void RaggedKvCache::append(uint32_t layer, const float* k_new, const float* v_new, uint32_t T) {
  KVZIP_ASSERT(layer < shape_.n_layers);
  const size_t D = shape_.head_dim, H = shape_.n_kv_heads;
  for (size_t h = 0; h < H; ++h) {
    const size_t i = idx(layer, h);
    KVZIP_ASSERT(len_[i] + T - kept_[i] <= room_);
    float* k = k_[layer].data() + (offset_[i] + len_[i]) * D;
    float* v = v_[layer].data() + (offset_[i] + len_[i]) * D;
    uint32_t* p = pos_[layer].data() + offset_[i] + len_[i];
    for (uint32_t t = 0; t < T; ++t) {
      std::memcpy(k + t * D, k_new + (size_t(t) * H + h) * D, D * 4);
      std::memcpy(v + t * D, v_new + (size_t(t) * H + h) * D, D * 4);
      p[t] = length_ + t;
    }
    len_[i] += T;
  }
}

void RaggedKvCache::retain(uint32_t layer, uint32_t kv_head, std::span<const uint32_t> rows) {
  KVZIP_ASSERT(layer < shape_.n_layers && kv_head < shape_.n_kv_heads);
  const size_t i = idx(layer, kv_head), D = shape_.head_dim;
  for (size_t x = 0; x < rows.size(); ++x)
    if (rows[x] >= len_[i] || (x > 0 && rows[x] <= rows[x - 1]))
      throw Error(Errc::invalid_argument,
                  "RaggedKvCache::retain: row list of layer " + std::to_string(layer) + " head " +
                      std::to_string(kv_head) + " is not strictly increasing within [0, " +
                      std::to_string(len_[i]) + ") at entry " + std::to_string(x));
  float* k = k_[layer].data() + offset_[i] * D;
  float* v = v_[layer].data() + offset_[i] * D;
  uint32_t* p = pos_[layer].data() + offset_[i];
  uint32_t base = 0;
  // rows[x] >= x, so moving rows down front to back never overwrites a row still to be moved.
  for (size_t x = 0; x < rows.size(); ++x) {
    const size_t src = rows[x];
    if (src < kept_[i]) ++base;
    if (src == x) continue;
    std::memcpy(k + x * D, k + src * D, D * 4);
    std::memcpy(v + x * D, v + src * D, D * 4);
    p[x] = p[src];
  }
  kept_[i] = base;
  len_[i] = static_cast<uint32_t>(rows.size());
}

void RaggedKvCache::commit_append(uint32_t T) { length_ += T; }

KvHeadView RaggedKvCache::view(uint32_t layer, uint32_t kv_head) const {
  KVZIP_ASSERT(layer < shape_.n_layers && kv_head < shape_.n_kv_heads);
  const size_t i = idx(layer, kv_head), D = shape_.head_dim;
  return KvHeadView{k_[layer].data() + offset_[i] * D, v_[layer].data() + offset_[i] * D,
                    pos_[layer].data() + offset_[i], len_[i]};
}

void RaggedKvCache::rollback(uint32_t length) {
  if (length > length_)
    throw Error(Errc::invalid_argument, "RaggedKvCache::rollback to " + std::to_string(length) +
                                            " past the logical length " + std::to_string(length_));
  for (uint32_t l = 0; l < shape_.n_layers; ++l)
    for (uint32_t h = 0; h < shape_.n_kv_heads; ++h) {
      const size_t i = idx(l, h);
      const uint32_t* p = pos_[l].data() + offset_[i];
      len_[i] = static_cast<uint32_t>(std::lower_bound(p, p + len_[i], length) - p);
      kept_[i] = std::min(kept_[i], len_[i]);
    }
  length_ = length;
  base_length_ = std::min(base_length_, length);
}

uint64_t RaggedKvCache::kept_total() const {
  uint64_t n = 0;
  for (uint32_t k : kept_) n += k;
  return n;
}

uint64_t RaggedKvCache::bytes_kept() const { return kept_total() * shape_.head_dim * 2 * 4; }

float* RaggedKvCache::k_rows(uint32_t l, uint32_t h) {
  return k_[l].data() + offset_[idx(l, h)] * shape_.head_dim;
}
float* RaggedKvCache::v_rows(uint32_t l, uint32_t h) {
  return v_[l].data() + offset_[idx(l, h)] * shape_.head_dim;
}
uint32_t* RaggedKvCache::positions(uint32_t l, uint32_t h) { return pos_[l].data() + offset_[idx(l, h)]; }
const float* RaggedKvCache::k_rows(uint32_t l, uint32_t h) const {
  return k_[l].data() + offset_[idx(l, h)] * shape_.head_dim;
}
const float* RaggedKvCache::v_rows(uint32_t l, uint32_t h) const {
  return v_[l].data() + offset_[idx(l, h)] * shape_.head_dim;
}
const uint32_t* RaggedKvCache::positions(uint32_t l, uint32_t h) const {
  return pos_[l].data() + offset_[idx(l, h)];
}

}  // namespace kvzip
