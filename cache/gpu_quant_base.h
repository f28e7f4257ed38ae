// GpuQuantBase: the q8/q4 rows of a compressed state in device memory as the .kvz file stores
// them (channel scales, group parameters, codes: kernels/kv_quant.h, spec/kvzip_format.md §12.1),
// never widened to f32 there either — the device twin of QuantBase (cache/quant_base.h). A
// GpuCache that holds one (GpuCache::attach_quant) keeps only each head's f32 rows itself (the
// f16-stored rows of the file, then appended question/answer rows); attention reads the
// quantized rows through KvSpan::quant, ahead of those (kernels/attention.h). Per layer one device
// array per kind, head-major as the file's layer is; read-only once filled. Memory per row at
// D = 64 and one group per row: q4 34 bytes, q8 66 (plus a channel-scale row per head), f32 256.
// Invariants: the segments handed out (segment()) point into the buffers and stay valid as long
// as the object, also across moves.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "cache/kv_cache.h"
#include "kernels/gpu.h"
#include "kernels/kv_quant.h"

namespace kvzip::model {

class GpuQuantBase {
 public:
  // Device memory for rows[l · Hkv + h] quantized rows per head in `layout` (layout.D ==
  // shape.head_dim), nothing copied yet: fill every layer with upload_layer. Errc::out_of_memory
  // when the device is full.
  GpuQuantBase(CacheShape shape, kernels::KvQuantLayout layout, std::vector<uint32_t> rows);
  GpuQuantBase(GpuQuantBase&&) noexcept = default;
  GpuQuantBase& operator=(GpuQuantBase&&) noexcept = default;

  // One layer's stored rows on the host, head-major (R = Σ rows of the layer's heads).
  struct HostLayer {
    std::span<const float> scale_k, scale_v;       // (Hkv, D) channel scales
    std::span<const uint16_t> params_k, params_v;  // (R, layout.param_words())
    std::span<const uint8_t> codes_k, codes_v;     // (R, layout.code_bytes())
  };
  // Copies layer `layer` to the device on `stream`, asynchronously: the host arrays must stay
  // untouched until the stream has passed this point. Errc::internal when a size does not match.
  void upload_layer(uint32_t layer, const HostLayer& src, void* stream);

  CacheShape shape() const { return shape_; }
  const kernels::KvQuantLayout& layout() const { return layout_; }
  uint32_t rows(uint32_t layer, uint32_t kv_head) const;
  // The head's quantized rows as attention reads them (a host struct of device pointers), or null
  // when it has none.
  const kernels::KvQuantSegment* segment(uint32_t layer, uint32_t kv_head) const;
  uint64_t bytes() const;  // device bytes of channel scales, parameters and codes

 private:
  struct Layer {
    kernels::gpu::GpuBuffer<float> scale_k, scale_v;
    kernels::gpu::GpuBuffer<uint16_t> params_k, params_v;
    kernels::gpu::GpuBuffer<uint8_t> codes_k, codes_v;
  };
  size_t at(uint32_t layer, uint32_t kv_head) const;  // checked index into rows_

  CacheShape shape_;
  kernels::KvQuantLayout layout_;
  std::vector<uint32_t> rows_;                 // (L·Hkv)
  std::vector<Layer> layers_;                  // (L)
  std::vector<kernels::KvQuantSegment> segs_;  // (L·Hkv) views into layers_
};

}  // namespace kvzip::model
