// GpuCache (see gpu_cache.h): device storage under a RaggedLayout. Growth re-lays out every layer
// with a larger room (new buffers for every layer first, then one device copy per head, then the
// swap); rollback finds per head the first row at or past the target position in the host copy
// of the positions, with the same code RaggedKvCache runs, so both caches forget the same rows.
#include "cache/gpu_cache.h"

#include <algorithm>
#include <string>

#include "common/error.h"
#include "kernels/elementwise.h"
#include "kernels/kv_append.h"

namespace kvzip::model {
namespace {

void cuda_fill(float* p, size_t n, uint64_t seed) {
#if KVZIP_HAVE_CUDA
  kernels::cuda::fill_uniform(p, n, seed, -1.0f, 1.0f, nullptr);
#else
  (void)p, (void)n, (void)seed;
  kernels::throw_unsupported_device(kernels::Device::Cuda, "fill_uniform");
#endif
}

// Device K/V arrays as RaggedLayout grows them: new buffers are staged beside the live ones, the
// copies run on `stream`, and the old buffers are freed only after the stream has passed them.
class DeviceStorage final : public RaggedStorage {
 public:
  DeviceStorage(std::vector<kernels::gpu::GpuBuffer<float>>& k,
                std::vector<kernels::gpu::GpuBuffer<float>>& v, size_t D, void* stream)
      : k_(k), v_(v), D_(D), stream_(stream), k_new_(k.size()), v_new_(v.size()) {}
  void stage_layer(uint32_t layer, uint64_t rows) override {
    k_new_[layer] =
        kernels::gpu::GpuBuffer<float>(rows * D_);  // Errc::out_of_memory when the device is full
    v_new_[layer] = kernels::gpu::GpuBuffer<float>(rows * D_);
  }
  void copy_rows(uint32_t layer, uint64_t from, uint64_t to, uint64_t n) override {
    copied_ = true;
    const size_t bytes = n * D_ * sizeof(float);
    kernels::gpu::copy_device(k_new_[layer].data() + to * D_, k_[layer].data() + from * D_, bytes,
                              stream_);
    kernels::gpu::copy_device(v_new_[layer].data() + to * D_, v_[layer].data() + from * D_, bytes,
                              stream_);
  }
  void finish_copies() override {
    if (copied_) kernels::gpu::synchronize(stream_);  // the old buffers are freed on commit
  }
  void commit_staged() noexcept override {
    k_.swap(k_new_);
    v_.swap(v_new_);
  }
  void drop_staged() noexcept override {
    if (!copied_) return;
    try {
      kernels::gpu::synchronize(stream_);  // no copy may still write the staged buffers freed below
    } catch (...) {}
  }

 private:
  std::vector<kernels::gpu::GpuBuffer<float>>& k_;
  std::vector<kernels::gpu::GpuBuffer<float>>& v_;
  size_t D_;
  void* stream_;
  bool copied_ = false;
  std::vector<kernels::gpu::GpuBuffer<float>> k_new_, v_new_;
};

std::vector<uint32_t> zeros(CacheShape s) {
  return std::vector<uint32_t>(size_t(s.n_layers) * s.n_kv_heads, 0);
}

}  // namespace

void GpuCache::lay_out(uint32_t room, void* stream) {
  const CacheShape s = layout_.shape();
  if (s.n_kv_heads > kernels::kMaxKvHeads)
    throw Error(Errc::unsupported, "GpuCache: " + std::to_string(s.n_kv_heads) +
                                       " KV heads, the CUDA kernels take at most " +
                                       std::to_string(kernels::kMaxKvHeads));
  k_.resize(s.n_layers);
  v_.resize(s.n_layers);
  DeviceStorage storage(k_, v_, s.head_dim, stream);
  layout_.lay_out(std::max<uint32_t>(room, 1), storage);
}

GpuCache::GpuCache(CacheShape shape, uint32_t room) : layout_("GpuCache", shape, 0, zeros(shape)) {
  lay_out(room, nullptr);
}

GpuCache GpuCache::from_ragged(const RaggedKvCache& host, uint32_t room, void* stream) {
  GpuCache c;
  // The base length and kept counts, refused when a head holds appended rows.
  c.layout_ = host.layout().compressed_state("GpuCache::from_ragged");
  c.lay_out(room, stream);
  const CacheShape s = c.shape();
  const size_t D = s.head_dim;
  c.upload_layers(
      [&](uint32_t l, float* k, float* v, uint32_t* positions) {
        size_t row = 0;  // head-major, as upload_layer reads them
        for (uint32_t h = 0; h < s.n_kv_heads; ++h) {
          const uint32_t n = host.kept(l, h);
          std::copy_n(host.k_rows(l, h), size_t(n) * D, k + row * D);
          std::copy_n(host.v_rows(l, h), size_t(n) * D, v + row * D);
          std::copy_n(host.positions(l, h), n, positions + row);
          row += n;
        }
      },
      stream);
  return c;
}

void GpuCache::upload_layers(const LayerPacker& pack, void* stream) {
  const CacheShape s = shape();
  const size_t D = s.head_dim;
  // Two pinned staging buffers, each one layer's K, V and positions: the host packs layer l + 1
  // into one while the copies of layer l drain the other (an event per buffer says when its
  // copies have finished), so host work (decoding a file, packing rows) overlaps the DMA.
  uint64_t most = 0;
  for (uint32_t l = 0; l < s.n_layers; ++l) {
    uint64_t rows = 0;
    for (uint32_t h = 0; h < s.n_kv_heads; ++h) rows += layout_.kept(l, h);
    most = std::max(most, rows);
  }
  const size_t half = 2 * most * D + most;  // floats per staging buffer: K, V, then positions
  float* stage = static_cast<float*>(
      kernels::gpu::malloc_pinned(std::max<size_t>(1, 2 * half) * sizeof(float)));
  void* done[2] = {nullptr, nullptr};
  auto release = [&] {
    kernels::gpu::destroy_event(done[0]);
    kernels::gpu::destroy_event(done[1]);
    kernels::gpu::free_pinned(stage);
  };
  try {
    done[0] = kernels::gpu::create_event();
    done[1] = kernels::gpu::create_event();
    for (uint32_t l = 0; l < s.n_layers; ++l) {
      const int b = l % 2;
      if (l >= 2) kernels::gpu::wait_event(done[b]);  // layer l - 2's copies have left this buffer
      float* k = stage + b * half;
      float* v = k + most * D;
      auto* positions = reinterpret_cast<uint32_t*>(v + most * D);  // same size as a float
      pack(l, k, v, positions);
      upload_layer(l, k, v, positions, stream);
      kernels::gpu::record_event(done[b], stream);
    }
    kernels::gpu::synchronize(stream);
  } catch (...) {
    try {
      kernels::gpu::synchronize(stream);  // no copy may still read the staging memory freed below
    } catch (...) {}
    release();
    throw;
  }
  release();
}

GpuCache GpuCache::with_layout(CacheShape shape, uint32_t logical_length,
                               const std::vector<uint32_t>& kept, uint32_t room) {
  GpuCache c;
  c.layout_ = RaggedLayout("GpuCache::with_layout", shape, logical_length, kept);
  c.lay_out(room, nullptr);
  return c;
}

void GpuCache::upload_layer(uint32_t layer, const float* k, const float* v,
                            const uint32_t* positions, void* stream) {
  KVZIP_ASSERT(layer < shape().n_layers);
  const size_t D = shape().head_dim;
  size_t row = 0;  // first row of head h in the head-major host arrays
  for (uint32_t h = 0; h < shape().n_kv_heads; ++h) {
    const size_t off = layout_.offset(layer, h), n = layout_.kept(layer, h);
    kernels::gpu::copy_to_device(k_[layer].data() + off * D, k + row * D, n * D * sizeof(float),
                                 stream);
    kernels::gpu::copy_to_device(v_[layer].data() + off * D, v + row * D, n * D * sizeof(float),
                                 stream);
    std::copy_n(positions + row, n, layout_.positions(layer, h));
    row += n;
  }
}

void GpuCache::fill_layer(uint32_t layer, const uint32_t* positions, const DeviceWriter& write) {
  KVZIP_ASSERT(layer < shape().n_layers);
  const size_t D = shape().head_dim;
  size_t row = 0;
  for (uint32_t h = 0; h < shape().n_kv_heads; ++h) {
    const size_t off = layout_.offset(layer, h), n = layout_.kept(layer, h);
    write(h, k_[layer].data() + off * D, v_[layer].data() + off * D);
    std::copy_n(positions + row, n, layout_.positions(layer, h));
    row += n;
  }
}

GpuCache GpuCache::random(CacheShape shape, uint32_t logical_length,
                          const std::vector<uint32_t>& kept, uint32_t room, uint64_t seed) {
  GpuCache c;
  c.layout_ = RaggedLayout("GpuCache::random", shape, logical_length, kept);
  c.lay_out(room, nullptr);
  for (uint32_t l = 0; l < shape.n_layers; ++l) {
    cuda_fill(c.k_[l].data(), c.k_[l].size(), seed * 7919 + 2 * l);
    cuda_fill(c.v_[l].data(), c.v_[l].size(), seed * 7919 + 2 * l + 1);
    for (uint32_t h = 0; h < shape.n_kv_heads; ++h) {
      const uint32_t n = c.layout_.kept(l, h);
      uint32_t* p = c.layout_.positions(l, h);
      // Evenly spread increasing positions below the logical length.
      for (uint32_t r = 0; r < n; ++r)
        p[r] = static_cast<uint32_t>(uint64_t(r) * logical_length / std::max<uint32_t>(n, 1));
    }
  }
  kernels::gpu::synchronize(nullptr);
  return c;
}

const float* GpuCache::k(uint32_t layer, uint32_t kv_head) const {
  return k_[layer].data() + layout_.offset(layer, kv_head) * shape().head_dim;
}

const float* GpuCache::v(uint32_t layer, uint32_t kv_head) const {
  return v_[layer].data() + layout_.offset(layer, kv_head) * shape().head_dim;
}

void GpuCache::reserve_append(uint32_t T, void* stream) {
  DeviceStorage storage(k_, v_, shape().head_dim, stream);
  layout_.reserve_append(T, storage);
}

void GpuCache::append(uint32_t layer, const float* k_new, const float* v_new, uint32_t T,
                      void* stream) {
  KVZIP_ASSERT(layer < shape().n_layers);
  const uint32_t H = shape().n_kv_heads;
  uint64_t dst[kernels::kMaxKvHeads];  // H <= kMaxKvHeads (lay_out)
  layout_.append(layer, T, dst);       // on a launch error the caller rolls back (cache/kv_cache.h)
  kv_append(kernels::Exec{kernels::Device::Cuda, nullptr, stream},
            kernels::KvAppendArgs{k_new, v_new, k_[layer].data(), v_[layer].data(), dst, T, H,
                                  shape().head_dim});
}

void GpuCache::commit_append(uint32_t T) { layout_.commit_append(T); }

void GpuCache::rollback(uint32_t length) {
  if (quant_ && length < layout_.base_length())  // the quantized rows cannot be dropped one by one
    throw Error(Errc::invalid_argument, "GpuCache::rollback: length " + std::to_string(length) +
                                            " is below the base length " +
                                            std::to_string(layout_.base_length()) +
                                            " of a cache with a quantized base");
  layout_.rollback(length);
}

void GpuCache::attach_quant(GpuQuantBase base) {
  const CacheShape s = shape(), b = base.shape();
  if (quant_ || b.n_layers != s.n_layers || b.n_kv_heads != s.n_kv_heads ||
      b.head_dim != s.head_dim)
    throw Error(Errc::internal,
                quant_ ? "GpuCache::attach_quant: the cache already has a quantized base"
                       : "GpuCache::attach_quant: the base's shape differs from the cache's");
  quant_ = std::make_unique<GpuQuantBase>(std::move(base));
}

KvCache GpuCache::to_host_dense(void* stream) const {
  if (quant_)
    throw Error(
        Errc::invalid_argument,
        "GpuCache::to_host_dense: the cache holds quantized rows (a q8/q4 base); only a cache "
        "grown from empty is dense");
  const CacheShape s = shape();
  const uint32_t L = s.n_layers, H = s.n_kv_heads, D = s.head_dim, T = logical_length();
  for (uint32_t l = 0; l < L; ++l)
    for (uint32_t h = 0; h < H; ++h)
      if (len(l, h) != T)
        throw Error(Errc::invalid_argument,
                    "GpuCache::to_host_dense: a head holds " + std::to_string(len(l, h)) + " of " +
                        std::to_string(T) + " rows; only a cache grown from empty is dense");
  KvCache host(s, T);
  host.reserve_append(T);
  std::vector<float> head(size_t(T) * D), k(size_t(T) * H * D), v(size_t(T) * H * D);
  for (uint32_t l = 0; l < L; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      std::vector<float>& dst = kv == 0 ? k : v;
      for (uint32_t h = 0; h < H; ++h) {  // (T, D) per head -> (T, Hkv, D)
        kernels::gpu::copy_to_host(head.data(), kv == 0 ? this->k(l, h) : this->v(l, h),
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
  return 2 * layout_.used_total() * shape().head_dim * sizeof(float) +
         (quant_ ? quant_->bytes() : 0);
}

}  // namespace kvzip::model
