// GpuCache (see gpu_cache.h). Growth re-lays out every layer with a larger room (one device copy
// per head); rollback finds per head the first row at or past the target position in the host
// copy of the positions, exactly as RaggedKvCache does, so both caches forget the same rows.
#include "model/gpu_cache.h"

#include <algorithm>
#include <string>

#include "common/error.h"
#include "kernels/elementwise.h"
#include "kernels/kv_append.h"

namespace kvzip {
namespace {

void cuda_fill(float* p, size_t n, uint64_t seed) {
#if KVZIP_HAVE_CUDA
  cuda::fill_uniform(p, n, seed, -1.0f, 1.0f, nullptr);
#else
  (void)p, (void)n, (void)seed;
  throw_unsupported_device(Device::Cuda, "fill_uniform");
#endif
}

}  // namespace

GpuCache::GpuCache(CacheShape shape, uint32_t room) : shape_(shape) {
  if (shape.n_layers == 0 || shape.n_kv_heads == 0 || shape.head_dim == 0)
    throw Error(Errc::invalid_argument, "GpuCache: every dimension must be > 0");
  if (shape.n_kv_heads > kMaxKvHeads)
    throw Error(Errc::unsupported, "GpuCache: " + std::to_string(shape.n_kv_heads) +
                                       " KV heads, the CUDA kernels take at most " +
                                       std::to_string(kMaxKvHeads));
  const size_t n = size_t(shape.n_layers) * shape.n_kv_heads;
  kept_.assign(n, 0);
  len_.assign(n, 0);
  offset_.assign(n, 0);
  k_.resize(shape.n_layers);
  v_.resize(shape.n_layers);
  pos_.resize(shape.n_layers);
  relayout(std::max<uint32_t>(room, 1), nullptr);
}

GpuCache GpuCache::from_ragged(const RaggedKvCache& host, uint32_t room, void* stream) {
  GpuCache c;
  c.shape_ = host.shape();
  if (c.shape_.n_kv_heads > kMaxKvHeads)
    throw Error(Errc::unsupported, "GpuCache: more KV heads than the CUDA kernels take");
  const uint32_t L = c.shape_.n_layers, H = c.shape_.n_kv_heads, D = c.shape_.head_dim;
  c.length_ = c.base_length_ = host.logical_length();
  c.kept_.resize(size_t(L) * H);
  for (uint32_t l = 0; l < L; ++l)
    for (uint32_t h = 0; h < H; ++h) c.kept_[c.idx(l, h)] = host.kept(l, h);
  c.len_ = c.kept_;
  c.offset_.assign(c.kept_.size(), 0);
  c.k_.resize(L);
  c.v_.resize(L);
  c.pos_.resize(L);
  c.relayout(std::max<uint32_t>(room, 1), stream);
  // Two pinned staging buffers, each one layer's K and V in the device layout: the host fills
  // layer l + 1 into one while the copies of layer l drain the other (an event per buffer says
  // when its copies have finished), so host packing and DMA overlap; one K and one V copy per layer.
  uint64_t most = 0;
  for (uint32_t l = 0; l < L; ++l) most = std::max<uint64_t>(most, c.layer_rows(l));
  const size_t half = 2 * most * D;  // floats per staging buffer (K then V)
  float* stage = static_cast<float*>(gpu::malloc_pinned(2 * half * sizeof(float)));
  void* done[2] = {nullptr, nullptr};
  auto release = [&] {
    gpu::destroy_event(done[0]);
    gpu::destroy_event(done[1]);
    gpu::free_pinned(stage);
  };
  try {
    done[0] = gpu::create_event();
    done[1] = gpu::create_event();
    for (uint32_t l = 0; l < L; ++l) {
      const int b = l % 2;
      if (l >= 2) gpu::wait_event(done[b]);  // layer l - 2's copies have left this buffer
      float* sk = stage + b * half;
      float* sv = sk + most * D;
      for (uint32_t h = 0; h < H; ++h) {
        const size_t i = c.idx(l, h), n = size_t(c.kept_[i]) * D;
        std::copy_n(host.k_rows(l, h), n, sk + c.offset_[i] * D);
        std::copy_n(host.v_rows(l, h), n, sv + c.offset_[i] * D);
        std::copy_n(host.positions(l, h), c.kept_[i], c.pos_[l].data() + c.offset_[i]);
      }
      const size_t bytes = c.layer_rows(l) * D * sizeof(float);
      gpu::copy_to_device(c.k_[l].data(), sk, bytes, stream);
      gpu::copy_to_device(c.v_[l].data(), sv, bytes, stream);
      gpu::record_event(done[b], stream);
    }
    gpu::synchronize(stream);
  } catch (...) {
    try {
      gpu::synchronize(stream);  // no copy may still read the staging memory freed below
    } catch (...) {
    }
    release();
    throw;
  }
  release();
  return c;
}

GpuCache GpuCache::with_layout(CacheShape shape, uint32_t logical_length,
                               const std::vector<uint32_t>& kept, uint32_t room) {
  if (shape.n_layers == 0 || shape.n_kv_heads == 0 || shape.head_dim == 0)
    throw Error(Errc::invalid_argument, "GpuCache: every dimension must be > 0");
  if (shape.n_kv_heads > kMaxKvHeads)
    throw Error(Errc::unsupported, "GpuCache: " + std::to_string(shape.n_kv_heads) +
                                       " KV heads, the CUDA kernels take at most " +
                                       std::to_string(kMaxKvHeads));
  if (kept.size() != size_t(shape.n_layers) * shape.n_kv_heads)
    throw Error(Errc::invalid_argument, "GpuCache::with_layout: " + std::to_string(kept.size()) +
                                            " row counts for L·Hkv heads");
  for (uint32_t n : kept)
    if (n > logical_length)
      throw Error(Errc::invalid_argument, "GpuCache::with_layout: a head keeps " +
                                              std::to_string(n) + " rows of a sequence of " +
                                              std::to_string(logical_length));
  GpuCache c;
  c.shape_ = shape;
  c.length_ = c.base_length_ = logical_length;
  c.kept_ = kept;
  c.len_ = kept;
  c.offset_.assign(kept.size(), 0);
  c.k_.resize(shape.n_layers);
  c.v_.resize(shape.n_layers);
  c.pos_.resize(shape.n_layers);
  c.relayout(std::max<uint32_t>(room, 1), nullptr);
  return c;
}

void GpuCache::upload_layer(uint32_t layer, const float* k, const float* v,
                            const uint32_t* positions, void* stream) {
  KVZIP_ASSERT(layer < shape_.n_layers);
  const size_t D = shape_.head_dim;
  size_t row = 0;  // first row of head h in the head-major host arrays
  for (uint32_t h = 0; h < shape_.n_kv_heads; ++h) {
    const size_t i = idx(layer, h), n = kept_[i];
    gpu::copy_to_device(k_[layer].data() + offset_[i] * D, k + row * D, n * D * sizeof(float), stream);
    gpu::copy_to_device(v_[layer].data() + offset_[i] * D, v + row * D, n * D * sizeof(float), stream);
    std::copy_n(positions + row, n, pos_[layer].data() + offset_[i]);
    row += n;
  }
}

GpuCache GpuCache::random(CacheShape shape, uint32_t logical_length,
                          const std::vector<uint32_t>& kept, uint32_t room, uint64_t seed) {
  GpuCache c;
  c.shape_ = shape;
  if (shape.n_kv_heads > kMaxKvHeads || kept.size() != size_t(shape.n_layers) * shape.n_kv_heads)
    throw Error(Errc::invalid_argument, "GpuCache::random: bad shape or kept list");
  for (uint32_t n : kept)
    if (n > logical_length) throw Error(Errc::invalid_argument, "GpuCache::random: kept > length");
  c.length_ = c.base_length_ = logical_length;
  c.kept_ = kept;
  c.len_ = kept;
  c.offset_.assign(kept.size(), 0);
  c.k_.resize(shape.n_layers);
  c.v_.resize(shape.n_layers);
  c.pos_.resize(shape.n_layers);
  c.relayout(std::max<uint32_t>(room, 1), nullptr);
  for (uint32_t l = 0; l < shape.n_layers; ++l) {
    cuda_fill(c.k_[l].data(), c.k_[l].size(), seed * 7919 + 2 * l);
    cuda_fill(c.v_[l].data(), c.v_[l].size(), seed * 7919 + 2 * l + 1);
    for (uint32_t h = 0; h < shape.n_kv_heads; ++h) {
      const size_t i = c.idx(l, h);
      uint32_t* p = c.pos_[l].data() + c.offset_[i];
      // Evenly spread increasing positions below the logical length.
      for (uint32_t r = 0; r < kept[i]; ++r)
        p[r] = static_cast<uint32_t>(uint64_t(r) * logical_length / std::max<uint32_t>(kept[i], 1));
    }
  }
  gpu::synchronize(nullptr);
  return c;
}

void GpuCache::relayout(uint32_t room, void* stream) {
  const uint32_t L = shape_.n_layers, H = shape_.n_kv_heads, D = shape_.head_dim;
  std::vector<uint64_t> off_new(offset_.size());
  for (uint32_t l = 0; l < L; ++l) {
    uint64_t rows = 0;
    for (uint32_t h = 0; h < H; ++h) {
      off_new[idx(l, h)] = rows;
      rows += uint64_t(kept_[idx(l, h)]) + room;
    }
    gpu::GpuBuffer<float> k(rows * D), v(rows * D);
    std::vector<uint32_t> pos(rows);
    for (uint32_t h = 0; h < H; ++h) {
      const size_t i = idx(l, h), n = len_[i];
      if (n == 0 || k_[l].size() == 0) continue;
      gpu::copy_device(k.data() + off_new[i] * D, k_[l].data() + offset_[i] * D, n * D * 4, stream);
      gpu::copy_device(v.data() + off_new[i] * D, v_[l].data() + offset_[i] * D, n * D * 4, stream);
      std::copy_n(pos_[l].data() + offset_[i], n, pos.data() + off_new[i]);
    }
    gpu::synchronize(stream);  // the old buffers are freed below
    k_[l] = std::move(k);
    v_[l] = std::move(v);
    pos_[l] = std::move(pos);
  }
  offset_.swap(off_new);
  room_ = room;
}

const float* GpuCache::k(uint32_t layer, uint32_t kv_head) const {
  return k_[layer].data() + offset_[idx(layer, kv_head)] * shape_.head_dim;
}

const float* GpuCache::v(uint32_t layer, uint32_t kv_head) const {
  return v_[layer].data() + offset_[idx(layer, kv_head)] * shape_.head_dim;
}

void GpuCache::reserve_append(uint32_t T, void* stream) {
  if (uint64_t(length_) + T > UINT32_MAX)
    throw Error(Errc::invalid_argument, "GpuCache: appending exceeds 2^32 positions");
  uint32_t need = 0;
  for (size_t i = 0; i < len_.size(); ++i) need = std::max(need, len_[i] - kept_[i] + T);
  if (need <= room_) return;
  relayout(std::max<uint32_t>(need, room_ + room_ / 2), stream);
}

void GpuCache::append(uint32_t layer, const float* k_new, const float* v_new, uint32_t T,
                      void* stream) {
  KVZIP_ASSERT(layer < shape_.n_layers);
  const uint32_t H = shape_.n_kv_heads;
  uint64_t dst[kMaxKvHeads];
  for (uint32_t h = 0; h < H; ++h) {
    const size_t i = idx(layer, h);
    KVZIP_ASSERT(len_[i] - kept_[i] + T <= room_);  // reserve_append came first
    dst[h] = offset_[i] + len_[i];
    uint32_t* p = pos_[layer].data() + dst[h];
    for (uint32_t t = 0; t < T; ++t) p[t] = length_ + t;
  }
  kv_append(Exec{Device::Cuda, nullptr, stream},
            KvAppendArgs{k_new, v_new, k_[layer].data(), v_[layer].data(), dst, T, H,
                         shape_.head_dim});
  for (uint32_t h = 0; h < H; ++h) len_[idx(layer, h)] += T;
}

void GpuCache::commit_append(uint32_t T) { length_ += T; }

void GpuCache::rollback(uint32_t length) {
  if (length > length_)
    throw Error(Errc::invalid_argument, "GpuCache::rollback to " + std::to_string(length) +
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

KvCache GpuCache::to_host_dense(void* stream) const {
  const uint32_t L = shape_.n_layers, H = shape_.n_kv_heads, D = shape_.head_dim, T = length_;
  for (size_t i = 0; i < len_.size(); ++i)
    if (len_[i] != T)
      throw Error(Errc::invalid_argument, "GpuCache::to_host_dense: a head holds " +
                                              std::to_string(len_[i]) + " of " + std::to_string(T) +
                                              " rows; only a cache grown from empty is dense");
  KvCache host(shape_, T);
  host.reserve_append(T);
  std::vector<float> head(size_t(T) * D), k(size_t(T) * H * D), v(size_t(T) * H * D);
  for (uint32_t l = 0; l < L; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      std::vector<float>& dst = kv == 0 ? k : v;
      for (uint32_t h = 0; h < H; ++h) {  // (T, D) per head -> (T, Hkv, D)
        gpu::copy_to_host(head.data(), kv == 0 ? this->k(l, h) : this->v(l, h),
                          head.size() * sizeof(float), stream);
        for (uint32_t t = 0; t < T; ++t)
          std::copy_n(head.data() + size_t(t) * D, D, dst.data() + (size_t(t) * H + h) * D);
      }
    }
    host.append(l, k.data(), v.data(), T);
  }
  host.commit_append(T);
  return host;
}

uint64_t GpuCache::bytes_used() const {
  uint64_t rows = 0;
  for (uint32_t n : len_) rows += n;
  return 2 * rows * shape_.head_dim * sizeof(float);
}

}  // namespace kvzip
