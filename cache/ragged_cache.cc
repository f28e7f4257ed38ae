// RaggedKvCache (see ragged_cache.h): host storage under a RaggedLayout. Appends write after each
// head's used rows; rollback finds, per head, the first row at or past the target position by
// binary search (rows are in increasing position), so it moves lengths only. Growth re-lays out
// all heads with a larger room, allocating every layer before anything moves.
#include "cache/ragged_cache.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <string>

#include "common/error.h"
#include "kernels/attention.h"

namespace kvzip::model {
namespace {

// Host K/V arrays as RaggedLayout grows them: new arrays are staged beside the live ones.
class HostStorage final : public RaggedStorage {
 public:
  HostStorage(std::vector<std::vector<float>>& k, std::vector<std::vector<float>>& v, size_t D)
      : k_(k), v_(v), D_(D), k_new_(k.size()), v_new_(v.size()) {}
  void stage_layer(uint32_t layer, uint64_t rows) override {
    try {
      k_new_[layer].resize(rows * D_);
      v_new_[layer].resize(rows * D_);
    } catch (const std::bad_alloc&) {
      throw Error(Errc::out_of_memory, "RaggedKvCache: cannot allocate " + std::to_string(rows) +
                                           " rows for layer " + std::to_string(layer));
    }
  }
  void copy_rows(uint32_t layer, uint64_t from, uint64_t to, uint64_t n) override {
    std::memcpy(k_new_[layer].data() + to * D_, k_[layer].data() + from * D_, n * D_ * 4);
    std::memcpy(v_new_[layer].data() + to * D_, v_[layer].data() + from * D_, n * D_ * 4);
  }
  void commit_staged() noexcept override {
    k_.swap(k_new_);
    v_.swap(v_new_);
  }
  void drop_staged() noexcept override {}  // the staged arrays die with this object

 private:
  std::vector<std::vector<float>>& k_;
  std::vector<std::vector<float>>& v_;
  size_t D_;
  std::vector<std::vector<float>> k_new_, v_new_;
};

}  // namespace

RaggedKvCache::RaggedKvCache(CacheShape shape, uint32_t logical_length,
                             const std::vector<uint32_t>& kept, uint32_t room)
    : layout_("RaggedKvCache", shape, logical_length, kept),
      k_(shape.n_layers),
      v_(shape.n_layers) {
  HostStorage s(k_, v_, shape.head_dim);
  layout_.lay_out(room, s);
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
      const auto& rows = keep[size_t(l) * s.n_kv_heads + h];
      float* k = r.k_rows(l, h);
      float* v = r.v_rows(l, h);
      uint32_t* p = r.positions(l, h);
      for (size_t j = 0; j < rows.size(); ++j) {
        // keep lists name positions; a trimmed local layer's rows are not its positions.
        uint32_t row = rows[j];
        if (row >= src.len || src.positions[row] != rows[j]) {
          const uint32_t* at = std::lower_bound(src.positions, src.positions + src.len, rows[j]);
          if (at == src.positions + src.len || *at != rows[j])
            throw Error(Errc::invalid_argument,
                        "RaggedKvCache::from_dense: layer " + std::to_string(l) +
                            " no longer holds position " + std::to_string(rows[j]) +
                            " (a local layer trimmed to its window)");
          row = static_cast<uint32_t>(at - src.positions);
        }
        std::memcpy(k + j * D, src.k + size_t(row) * D, D * 4);
        std::memcpy(v + j * D, src.v + size_t(row) * D, D * 4);
        p[j] = rows[j];
      }
    }
  return r;
}

void RaggedKvCache::reserve_append(uint32_t T) {
  HostStorage s(k_, v_, layout_.shape().head_dim);
  layout_.reserve_append(T, s);
}

void RaggedKvCache::append(uint32_t layer, const float* k_new, const float* v_new, uint32_t T) {
  KVZIP_ASSERT(layer < layout_.shape().n_layers);
  const size_t D = layout_.shape().head_dim, H = layout_.shape().n_kv_heads;
  for (uint32_t h = 0; h < H; ++h) {  // rows go after each head's used rows (layout_.append)
    const uint64_t row = layout_.offset(layer, h) + layout_.len(layer, h);
    KVZIP_ASSERT(layout_.len(layer, h) - layout_.kept(layer, h) + T <= layout_.room());
    float* k = k_[layer].data() + row * D;
    float* v = v_[layer].data() + row * D;
    for (uint32_t t = 0; t < T; ++t) {
      std::memcpy(k + t * D, k_new + (size_t(t) * H + h) * D, D * 4);
      std::memcpy(v + t * D, v_new + (size_t(t) * H + h) * D, D * 4);
    }
  }
  layout_.append(layer, T, nullptr);
}

void RaggedKvCache::retain(uint32_t layer, uint32_t kv_head, std::span<const uint32_t> rows) {
  layout_.check_retain(layer, kv_head, rows);
  const size_t D = layout_.shape().head_dim;
  float* k = k_rows(layer, kv_head);
  float* v = v_rows(layer, kv_head);
  // rows[x] >= x, so moving rows down front to back never overwrites a row still to be moved.
  for (size_t x = 0; x < rows.size(); ++x) {
    const size_t src = rows[x];
    if (src == x) continue;
    std::memcpy(k + x * D, k + src * D, D * 4);
    std::memcpy(v + x * D, v + src * D, D * 4);
  }
  layout_.retain(layer, kv_head, rows);
}

void RaggedKvCache::commit_append(uint32_t T) { layout_.commit_append(T); }

KvHeadView RaggedKvCache::view(uint32_t layer, uint32_t kv_head) const {
  KVZIP_ASSERT(layer < layout_.shape().n_layers && kv_head < layout_.shape().n_kv_heads);
  KvHeadView v{k_rows(layer, kv_head), v_rows(layer, kv_head), positions(layer, kv_head),
               layout_.len(layer, kv_head)};
  v.kt = key_tiles(layer, kv_head);
  v.kt_rows = v.kt ? layout_.kept(layer, kv_head) : 0;
  return v;
}

void RaggedKvCache::make_key_tiles() {
  const CacheShape s = layout_.shape();
  kt_off_.resize(size_t(s.n_layers) * s.n_kv_heads);
  size_t total = 0;
  for (uint32_t l = 0; l < s.n_layers; ++l)
    for (uint32_t h = 0; h < s.n_kv_heads; ++h) {
      kt_off_[size_t(l) * s.n_kv_heads + h] = total;
      total += kernels::key_tile_floats(kept(l, h), s.head_dim);
    }
  kt_.resize(total);
  const RaggedKvCache& self = *this;  // the const k_rows: the mutable one drops the tiles
  for (uint32_t l = 0; l < s.n_layers; ++l)
    for (uint32_t h = 0; h < s.n_kv_heads; ++h)
      kernels::cpu::transpose_key_tiles(self.k_rows(l, h), kept(l, h), s.head_dim,
                                        kt_.data() + kt_off_[size_t(l) * s.n_kv_heads + h]);
}

const float* RaggedKvCache::key_tiles(uint32_t l, uint32_t h) const {
  return kt_.empty() ? nullptr : kt_.data() + kt_off_[size_t(l) * layout_.shape().n_kv_heads + h];
}

void RaggedKvCache::rollback(uint32_t length) { layout_.rollback(length); }

uint64_t RaggedKvCache::bytes_kept() const {
  return kept_total() * layout_.shape().head_dim * 2 * 4;
}

float* RaggedKvCache::k_rows(uint32_t l, uint32_t h) {
  if (!kt_.empty()) kt_ = {}, kt_off_ = {};
  return k_[l].data() + layout_.offset(l, h) * layout_.shape().head_dim;
}
float* RaggedKvCache::v_rows(uint32_t l, uint32_t h) {
  return v_[l].data() + layout_.offset(l, h) * layout_.shape().head_dim;
}
uint32_t* RaggedKvCache::positions(uint32_t l, uint32_t h) { return layout_.positions(l, h); }
const float* RaggedKvCache::k_rows(uint32_t l, uint32_t h) const {
  return k_[l].data() + layout_.offset(l, h) * layout_.shape().head_dim;
}
const float* RaggedKvCache::v_rows(uint32_t l, uint32_t h) const {
  return v_[l].data() + layout_.offset(l, h) * layout_.shape().head_dim;
}
const uint32_t* RaggedKvCache::positions(uint32_t l, uint32_t h) const {
  return layout_.positions(l, h);
}

}  // namespace kvzip::model
