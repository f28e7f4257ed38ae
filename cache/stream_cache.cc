// StreamKvCache (see stream_cache.h): per-head arrays grown and shrunk one head at a time. Growth
// allocates a head's new arrays before moving anything, so an allocation failure leaves every row
// where it was; a partly grown cache is still whole, only larger.
#include "cache/stream_cache.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <string>

#include "common/error.h"

namespace kvzip::model {

StreamKvCache::StreamKvCache(CacheShape shape)
    : shape_(shape), heads_(size_t(shape.n_layers) * shape.n_kv_heads) {
  if (shape.n_layers == 0 || shape.n_kv_heads == 0 || shape.head_dim == 0)
    throw Error(Errc::invalid_argument, "StreamKvCache: a zero dimension in the cache shape");
}

void StreamKvCache::resize_head(Head& head, uint32_t capacity) {
  const size_t D = shape_.head_dim;
  Head grown;
  try {
    grown.k.resize(size_t(capacity) * D);
    grown.v.resize(size_t(capacity) * D);
    grown.pos.resize(capacity);
  } catch (const std::bad_alloc&) {
    throw Error(Errc::out_of_memory,
                "StreamKvCache: cannot allocate " + std::to_string(capacity) + " rows for a head");
  }
  if (head.len > 0) {  // an empty head's arrays may be null, which memcpy may not be given
    std::memcpy(grown.k.data(), head.k.data(), size_t(head.len) * D * 4);
    std::memcpy(grown.v.data(), head.v.data(), size_t(head.len) * D * 4);
    std::memcpy(grown.pos.data(), head.pos.data(), size_t(head.len) * 4);
  }
  grown.len = head.len;
  head = std::move(grown);
}

void StreamKvCache::reserve_append(uint32_t T) {
  if (uint64_t(length_) + T > UINT32_MAX)
    throw Error(Errc::invalid_argument, "StreamKvCache: more than 2^32 positions");
  for (Head& head : heads_)
    if (head.len + uint64_t(T) > head.capacity()) {
      const uint64_t need = uint64_t(head.len) + T + head.len / 8;
      resize_head(head, static_cast<uint32_t>(std::min<uint64_t>(need, UINT32_MAX)));
    }
}

void StreamKvCache::append(uint32_t layer, const float* k_new, const float* v_new, uint32_t T) {
  KVZIP_ASSERT(layer < shape_.n_layers);
  const size_t D = shape_.head_dim, H = shape_.n_kv_heads;
  for (uint32_t h = 0; h < H; ++h) {
    Head& head = at(layer, h);
    KVZIP_ASSERT(head.len + uint64_t(T) <= head.capacity());
    for (uint32_t t = 0; t < T; ++t) {
      std::memcpy(head.k.data() + size_t(head.len + t) * D, k_new + (size_t(t) * H + h) * D, D * 4);
      std::memcpy(head.v.data() + size_t(head.len + t) * D, v_new + (size_t(t) * H + h) * D, D * 4);
      head.pos[head.len + t] = length_ + t;
    }
    head.len += T;
  }
  pending_ = T;
}

void StreamKvCache::commit_append(uint32_t T) {
  length_ += T;
  pending_ = 0;
}

KvHeadView StreamKvCache::view(uint32_t layer, uint32_t kv_head) const {
  KVZIP_ASSERT(layer < shape_.n_layers && kv_head < shape_.n_kv_heads);
  const Head& head = at(layer, kv_head);
  return KvHeadView{head.k.data(), head.v.data(), head.pos.data(), head.len};
}

void StreamKvCache::rollback(uint32_t length) {
  if (length > length_)
    throw Error(Errc::invalid_argument, "StreamKvCache: rollback to " + std::to_string(length) +
                                            " past the length " + std::to_string(length_));
  for (Head& head : heads_)
    head.len = static_cast<uint32_t>(
        std::lower_bound(head.pos.begin(), head.pos.begin() + head.len, length) - head.pos.begin());
  length_ = length;
  pending_ = 0;
}

void StreamKvCache::retain(uint32_t layer, uint32_t kv_head, std::span<const uint32_t> rows) {
  if (layer >= shape_.n_layers || kv_head >= shape_.n_kv_heads)
    throw Error(Errc::invalid_argument, "StreamKvCache::retain: no head (" + std::to_string(layer) +
                                            ", " + std::to_string(kv_head) + ")");
  Head& head = at(layer, kv_head);
  for (size_t x = 0; x < rows.size(); ++x)
    if (rows[x] >= head.len || (x > 0 && rows[x] <= rows[x - 1]))
      throw Error(Errc::invalid_argument,
                  "StreamKvCache::retain: the rows of head (" + std::to_string(layer) + ", " +
                      std::to_string(kv_head) + ") are not strictly increasing within [0, " +
                      std::to_string(head.len) + ")");
  const size_t D = shape_.head_dim;
  // rows[x] >= x: moving front to back never overwrites a row still to be moved.
  for (size_t x = 0; x < rows.size(); ++x) {
    const size_t src = rows[x];
    if (src == x) continue;
    std::memcpy(head.k.data() + x * D, head.k.data() + src * D, D * 4);
    std::memcpy(head.v.data() + x * D, head.v.data() + src * D, D * 4);
    head.pos[x] = head.pos[src];
  }
  head.len = static_cast<uint32_t>(rows.size());
}

void StreamKvCache::shrink(uint32_t spare) {
  for (Head& head : heads_) {
    const uint64_t need = uint64_t(head.len) + spare;
    if (head.capacity() > 2 * need)
      resize_head(head, static_cast<uint32_t>(std::min<uint64_t>(need + need / 8, UINT32_MAX)));
  }
}

uint64_t StreamKvCache::rows_total() const {
  uint64_t n = 0;
  for (const Head& head : heads_) n += head.len;
  return n;
}

uint64_t StreamKvCache::bytes_allocated() const {
  uint64_t n = 0;
  for (const Head& head : heads_) n += uint64_t(head.capacity()) * (2 * shape_.head_dim + 1) * 4;
  return n;
}

RaggedKvCache StreamKvCache::take(uint32_t room) {
  if (pending_ != 0)
    throw Error(Errc::invalid_argument, "StreamKvCache::take: an append is not committed");
  std::vector<uint32_t> kept(heads_.size());
  for (size_t i = 0; i < heads_.size(); ++i) kept[i] = heads_[i].len;
  RaggedKvCache out(shape_, length_, kept, room);
  const size_t D = shape_.head_dim;
  for (uint32_t l = 0; l < shape_.n_layers; ++l)
    for (uint32_t h = 0; h < shape_.n_kv_heads; ++h) {
      Head& head = at(l, h);
      if (head.len > 0) {
        std::memcpy(out.k_rows(l, h), head.k.data(), size_t(head.len) * D * 4);
        std::memcpy(out.v_rows(l, h), head.v.data(), size_t(head.len) * D * 4);
        std::memcpy(out.positions(l, h), head.pos.data(), size_t(head.len) * 4);
      }
      head = Head{};
    }
  length_ = 0;
  return out;
}

void StreamKvCache::release(uint32_t layer) {
  KVZIP_ASSERT(layer < shape_.n_layers);
  for (uint32_t h = 0; h < shape_.n_kv_heads; ++h) at(layer, h) = Head{};
}

}  // namespace kvzip::model
