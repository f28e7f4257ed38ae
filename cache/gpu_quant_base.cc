// GpuQuantBase (see gpu_quant_base.h): one device buffer per kind and layer, sized up front from
// the per-head row counts, and per head a KvQuantSegment pointing into them (the buffers never move
// after construction: a move of the object moves the GpuBuffer handles, not the memory).
#include "cache/gpu_quant_base.h"

#include <string>

#include "common/error.h"

namespace kvzip::model {

GpuQuantBase::GpuQuantBase(CacheShape shape, kernels::KvQuantLayout layout,
                           std::vector<uint32_t> rows)
    : shape_(shape), layout_(layout), rows_(std::move(rows)) {
  const uint32_t L = shape.n_layers, H = shape.n_kv_heads;
  if (rows_.size() != size_t(L) * H || layout.D != shape.head_dim)
    throw Error(Errc::internal,
                "GpuQuantBase: " + std::to_string(rows_.size()) + " row counts for " +
                    std::to_string(L) + " layers of " + std::to_string(H) + " heads, layout D " +
                    std::to_string(layout.D) + " for head_dim " + std::to_string(shape.head_dim));
  const size_t D = shape.head_dim, words = layout.param_words(), code_bytes = layout.code_bytes();
  layers_.resize(L);
  segs_.resize(size_t(L) * H);
  for (uint32_t l = 0; l < L; ++l) {
    uint64_t R = 0;
    for (uint32_t h = 0; h < H; ++h) R += rows_[at(l, h)];
    Layer& y = layers_[l];
    y.scale_k = kernels::gpu::GpuBuffer<float>(H * D);
    y.scale_v = kernels::gpu::GpuBuffer<float>(H * D);
    y.params_k = kernels::gpu::GpuBuffer<uint16_t>(R * words);
    y.params_v = kernels::gpu::GpuBuffer<uint16_t>(R * words);
    y.codes_k = kernels::gpu::GpuBuffer<uint8_t>(R * code_bytes);
    y.codes_v = kernels::gpu::GpuBuffer<uint8_t>(R * code_bytes);
    uint64_t row = 0;  // the head's first row in the layer
    for (uint32_t h = 0; h < H; ++h) {
      const uint32_t n = rows_[at(l, h)];
      auto side = [&](const kernels::gpu::GpuBuffer<float>& c,
                      const kernels::gpu::GpuBuffer<uint16_t>& p,
                      const kernels::gpu::GpuBuffer<uint8_t>& q) {
        return kernels::KvQuantRows{layout, n, c.data() + h * D, p.data() + row * words,
                                    q.data() + row * code_bytes};
      };
      segs_[at(l, h)] = kernels::KvQuantSegment{side(y.scale_k, y.params_k, y.codes_k),
                                                side(y.scale_v, y.params_v, y.codes_v)};
      row += n;
    }
  }
}

size_t GpuQuantBase::at(uint32_t layer, uint32_t kv_head) const {
  KVZIP_ASSERT(layer < shape_.n_layers && kv_head < shape_.n_kv_heads);
  return size_t(layer) * shape_.n_kv_heads + kv_head;
}

void GpuQuantBase::upload_layer(uint32_t layer, const HostLayer& src, void* stream) {
  KVZIP_ASSERT(layer < shape_.n_layers);
  Layer& y = layers_[layer];
  auto put = [&](auto& dst, auto from, const char* what) {
    if (from.size() != dst.size())
      throw Error(Errc::internal, "GpuQuantBase::upload_layer: layer " + std::to_string(layer) +
                                      " " + what + " holds " + std::to_string(from.size()) +
                                      " values, expected " + std::to_string(dst.size()));
    if (!from.empty())
      kernels::gpu::copy_to_device(dst.data(), from.data(), from.size_bytes(), stream);
  };
  put(y.scale_k, src.scale_k, "K channel scales");
  put(y.scale_v, src.scale_v, "V channel scales");
  put(y.params_k, src.params_k, "K parameters");
  put(y.params_v, src.params_v, "V parameters");
  put(y.codes_k, src.codes_k, "K codes");
  put(y.codes_v, src.codes_v, "V codes");
}

uint32_t GpuQuantBase::rows(uint32_t layer, uint32_t kv_head) const {
  return rows_[at(layer, kv_head)];
}

const kernels::KvQuantSegment* GpuQuantBase::segment(uint32_t layer, uint32_t kv_head) const {
  const size_t i = at(layer, kv_head);
  return rows_[i] ? &segs_[i] : nullptr;
}

uint64_t GpuQuantBase::bytes() const {
  uint64_t b = 0;
  for (const Layer& y : layers_)
    b += y.scale_k.bytes() + y.scale_v.bytes() + y.params_k.bytes() + y.params_v.bytes() +
         y.codes_k.bytes() + y.codes_v.bytes();
  return b;
}

}  // namespace kvzip::model
