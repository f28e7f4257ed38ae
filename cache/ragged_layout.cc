// RaggedLayout (see ragged_layout.h). Growth computes the new offsets, allocates the positions and
// asks the storage for every layer's new arrays before anything is copied; only once all of that
// has succeeded do the live arrays, offsets and positions change, so an out-of-memory at layer
// l > 0 (the likely failure when a device cache grows) cannot leave layers below l in the new
// layout read through the old offsets.
#include "cache/ragged_layout.h"

#include <algorithm>
#include <new>
#include <string>

#include "common/error.h"

namespace kvzip::model {
namespace {

thread_local int g_fail_countdown = -1;  // testing::fail_layer_allocation

// The test seam: true when this layer allocation is the one to fail.
bool injected_failure() {
  if (g_fail_countdown < 0) return false;
  return g_fail_countdown-- == 0;
}

}  // namespace

namespace testing {
void fail_layer_allocation(int n) { g_fail_countdown = n < 0 ? -1 : n; }
}  // namespace testing

RaggedLayout::RaggedLayout(const char* who, CacheShape shape, uint32_t logical_length,
                           std::vector<uint32_t> kept)
    : shape_(shape), length_(logical_length), base_length_(logical_length), kept_(std::move(kept)) {
  if (shape.n_layers == 0 || shape.n_kv_heads == 0 || shape.head_dim == 0)
    throw Error(Errc::invalid_argument, std::string(who) + ": every dimension must be > 0");
  if (kept_.size() != size_t(shape.n_layers) * shape.n_kv_heads)
    throw Error(Errc::invalid_argument,
                std::string(who) + ": " + std::to_string(kept_.size()) +
                    " row counts for L·Hkv = " +
                    std::to_string(size_t(shape.n_layers) * shape.n_kv_heads) + " heads");
  for (uint32_t n : kept_)
    if (n > logical_length)
      throw Error(Errc::invalid_argument, std::string(who) + ": a head keeps " + std::to_string(n) +
                                              " rows of a sequence of " +
                                              std::to_string(logical_length));
  len_ = kept_;
  offset_.assign(kept_.size(), 0);
  pos_.resize(shape.n_layers);
}

void RaggedLayout::lay_out(uint32_t room, RaggedStorage& storage) {
  relayout(room, storage, false);
}

void RaggedLayout::relayout(uint32_t room, RaggedStorage& storage, bool copy) {
  const uint32_t L = shape_.n_layers, H = shape_.n_kv_heads;
  std::vector<uint64_t> off(offset_.size());
  std::vector<std::vector<uint32_t>> pos(L);
  try {
    for (uint32_t l = 0; l < L; ++l) {
      uint64_t rows = 0;
      for (uint32_t h = 0; h < H; ++h) {
        off[idx(l, h)] = rows;
        rows += uint64_t(kept_[idx(l, h)]) + room;
      }
      if (injected_failure())
        throw Error(Errc::out_of_memory, "ragged cache: layer " + std::to_string(l) +
                                             " allocation failed (injected by a test)");
      try {
        pos[l].resize(rows);
      } catch (const std::bad_alloc&) {
        throw Error(Errc::out_of_memory, "ragged cache: cannot allocate the positions of " +
                                             std::to_string(rows) + " rows");
      }
      storage.stage_layer(l, rows);
    }
    if (copy) {
      for (uint32_t l = 0; l < L; ++l)
        for (uint32_t h = 0; h < H; ++h) {
          const size_t i = idx(l, h);
          if (len_[i] == 0) continue;
          storage.copy_rows(l, offset_[i], off[i], len_[i]);
          std::copy_n(pos_[l].data() + offset_[i], len_[i], pos[l].data() + off[i]);
        }
      storage.finish_copies();
    }
  } catch (...) {
    storage.drop_staged();
    throw;
  }
  storage.commit_staged();
  offset_.swap(off);
  pos_.swap(pos);
  room_ = room;
}

void RaggedLayout::reserve_append(uint32_t T, RaggedStorage& storage) {
  if (uint64_t(length_) + T > UINT32_MAX)
    throw Error(Errc::invalid_argument, "ragged cache: appending exceeds 2^32 positions");
  uint32_t need = 0;  // most rows any head holds beyond its kept rows after the append
  for (size_t i = 0; i < len_.size(); ++i) need = std::max(need, len_[i] - kept_[i] + T);
  if (need <= room_) return;
  relayout(std::max<uint32_t>(need, room_ + room_ / 2), storage, true);
}

void RaggedLayout::append(uint32_t layer, uint32_t T, uint64_t* dst_rows) {
  KVZIP_ASSERT(layer < shape_.n_layers);
  for (uint32_t h = 0; h < shape_.n_kv_heads; ++h) {
    const size_t i = idx(layer, h);
    KVZIP_ASSERT(len_[i] - kept_[i] + T <= room_);  // reserve_append came first
    if (dst_rows) dst_rows[h] = offset_[i] + len_[i];
    uint32_t* p = pos_[layer].data() + offset_[i] + len_[i];
    for (uint32_t t = 0; t < T; ++t) p[t] = length_ + t;
    len_[i] += T;
  }
}

void RaggedLayout::rollback(uint32_t length) {
  if (length > length_)
    throw Error(Errc::invalid_argument, "ragged cache: rollback to " + std::to_string(length) +
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

void RaggedLayout::check_retain(uint32_t layer, uint32_t kv_head,
                                std::span<const uint32_t> rows) const {
  KVZIP_ASSERT(layer < shape_.n_layers && kv_head < shape_.n_kv_heads);
  const size_t i = idx(layer, kv_head);
  for (size_t x = 0; x < rows.size(); ++x)
    if (rows[x] >= len_[i] || (x > 0 && rows[x] <= rows[x - 1]))
      throw Error(Errc::invalid_argument,
                  "RaggedKvCache::retain: row list of layer " + std::to_string(layer) + " head " +
                      std::to_string(kv_head) + " is not strictly increasing within [0, " +
                      std::to_string(len_[i]) + ") at entry " + std::to_string(x));
}

void RaggedLayout::retain(uint32_t layer, uint32_t kv_head, std::span<const uint32_t> rows) {
  check_retain(layer, kv_head, rows);
  const size_t i = idx(layer, kv_head);
  uint32_t* p = pos_[layer].data() + offset_[i];
  uint32_t base = 0;
  // rows[x] >= x: moving front to back never overwrites a position still to be moved.
  for (size_t x = 0; x < rows.size(); ++x) {
    if (rows[x] < kept_[i]) ++base;
    p[x] = p[rows[x]];
  }
  kept_[i] = base;
  len_[i] = static_cast<uint32_t>(rows.size());
}

RaggedLayout RaggedLayout::compressed_state(const char* who) const {
  for (uint32_t l = 0; l < shape_.n_layers; ++l)
    for (uint32_t h = 0; h < shape_.n_kv_heads; ++h)
      if (len_[idx(l, h)] != kept_[idx(l, h)])
        throw Error(Errc::invalid_argument,
                    std::string(who) + ": layer " + std::to_string(l) + " head " +
                        std::to_string(h) + " holds " + std::to_string(len_[idx(l, h)]) +
                        " rows, " + std::to_string(kept_[idx(l, h)]) +
                        " of them kept: appended rows would be lost (reset the cache first)");
  return RaggedLayout(who, shape_, base_length_, kept_);
}

uint64_t RaggedLayout::kept_total() const {
  uint64_t n = 0;
  for (uint32_t k : kept_) n += k;
  return n;
}

uint64_t RaggedLayout::used_total() const {
  uint64_t n = 0;
  for (uint32_t k : len_) n += k;
  return n;
}

}  // namespace kvzip::model
