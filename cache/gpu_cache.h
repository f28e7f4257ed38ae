// GpuCache: the KV cache in device memory, one type for the dense cache a GPU prefill builds and
// the ragged cache a .kvz file holds (a dense cache is a ragged one with nothing kept and all
// rows appended). The bookkeeping is RaggedLayout (cache/ragged_layout.h), the one RaggedKvCache
// uses: per layer one K and one V array (rows, D), head-major, head (l, h) at rows [offset,
// offset + kept + room), rows in increasing original position; the positions stay on the host
// (only rollback reads them), and growth allocates every layer before anything moves, so a failed
// device allocation leaves the cache as it was. Appending and rolling back follow the
// AttentionCache protocol (cache/kv_cache.h): reserve_append(T), append(layer, ...) per layer,
// commit_append(T); rollback(n) moves lengths only. No CUDA header is included from here.
// A q8/q4 file's cache may also hold a quantized base (attach_quant, cache/gpu_quant_base.h):
// then each head's rows here are only its f32 ones (the file's f16-stored rows and what is
// appended), and its quantized rows, which precede them, are attended through quant(layer, h).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "cache/gpu_quant_base.h"
#include "cache/kv_cache.h"
#include "cache/ragged_cache.h"
#include "cache/ragged_layout.h"
#include "kernels/gpu.h"

namespace kvzip::model {

class GpuCache {
 public:
  // An empty cache (logical length 0) with `room` rows per head before it first grows.
  GpuCache(CacheShape shape, uint32_t room);
  // The compressed state of `host` (kept rows, positions, base length) in device memory, with
  // `room` rows of append room per head, through upload_layers (packing layer l + 1 on the host
  // overlaps the asynchronous copies of layer l, on `stream`); returns once every copy has
  // finished. Throws Errc::invalid_argument when a head of `host` holds appended rows (they would
  // be lost: reset() it first).
  static GpuCache from_ragged(const RaggedKvCache& host, uint32_t room, void* stream = nullptr);
  // The device layout of a compressed state (kept[l · Hkv + h] rows per head at logical length
  // `logical_length`, `room` rows of append room) with nothing copied yet: fill every layer with
  // upload_layer before use (loaders that decode a file layer by layer, loader/loader.h).
  static GpuCache with_layout(CacheShape shape, uint32_t logical_length,
                              const std::vector<uint32_t>& kept, uint32_t room);
  // Fills every layer's compressed state through two pinned staging buffers that alternate:
  // pack(l, k, v, positions) writes layer l's kept rows head-major into k, v (R_l, D) and
  // positions (R_l) while the asynchronous copies of layer l - 1 drain the other buffer; each
  // layer then goes up with upload_layer. Returns once every copy has finished; on an exception
  // (from pack or a copy) the stream is drained before the staging memory is freed.
  using LayerPacker = std::function<void(uint32_t layer, float* k, float* v, uint32_t* positions)>;
  void upload_layers(const LayerPacker& pack, void* stream);
  // Layer `layer`'s kept rows from head-major host arrays k, v (R_l, D) and positions (R_l), as a
  // .kvz stores them: one asynchronous copy per head for K and V on `stream` (the host arrays must
  // stay untouched until the stream has passed this point; pinned memory makes the copy async).
  void upload_layer(uint32_t layer, const float* k, const float* v, const uint32_t* positions,
                    void* stream);
  // Layer `layer`'s kept rows written on the device by the caller (a loader that decodes on the
  // device: loader/loader.h, q8/q4 files): write(h, k, v) gets the device addresses of head h's
  // first kept row (kept(layer, h) rows of D floats from each) and queues its work on the
  // caller's stream; positions (R_l, head-major, as upload_layer's) are copied on the host.
  using DeviceWriter = std::function<void(uint32_t kv_head, float* k, float* v)>;
  void fill_layer(uint32_t layer, const uint32_t* positions, const DeviceWriter& write);
  // A compressed state with kept[l · Hkv + h] rows per head at logical length `logical_length`,
  // K/V uniform in [-1, 1) drawn on the device (benchmarks: speed does not depend on values).
  static GpuCache random(CacheShape shape, uint32_t logical_length,
                         const std::vector<uint32_t>& kept, uint32_t room, uint64_t seed);

  // Attaches the quantized rows that precede every head's rows here (same shape; its rows are
  // base rows, never rolled back). Errc::internal on a shape mismatch or a second base.
  void attach_quant(GpuQuantBase base);
  bool quantized() const { return quant_ != nullptr; }
  // Head (layer, kv_head)'s quantized rows for KvSpan::quant, or null (none, or no base).
  const kernels::KvQuantSegment* quant(uint32_t layer, uint32_t kv_head) const {
    return quant_ ? quant_->segment(layer, kv_head) : nullptr;
  }

  CacheShape shape() const { return layout_.shape(); }
  uint32_t logical_length() const { return layout_.logical_length(); }
  uint32_t base_length() const { return layout_.base_length(); }
  uint32_t len(uint32_t layer, uint32_t kv_head) const { return layout_.len(layer, kv_head); }
  const float* k(uint32_t layer, uint32_t kv_head) const;  // device (len, D)
  const float* v(uint32_t layer, uint32_t kv_head) const;  // device (len, D)
  const RaggedLayout& layout() const { return layout_; }

  void reserve_append(uint32_t T, void* stream = nullptr);
  // k_new, v_new: device (T, Hkv, D) at positions logical_length() ...
  void append(uint32_t layer, const float* k_new, const float* v_new, uint32_t T, void* stream);
  void commit_append(uint32_t T);
  void rollback(
      uint32_t length);  // with a quantized base: Errc::invalid_argument below base_length()
  void reset() { rollback(layout_.base_length()); }

  // A dense host copy: requires every head of every layer to hold all logical_length() rows
  // (a cache grown from empty, e.g. after a GPU prefill) and no quantized base. Synchronous.
  KvCache to_host_dense(void* stream = nullptr) const;
  uint64_t bytes_used() const;  // 2 · Σ len · D · 4, plus the quantized base's bytes

 private:
  GpuCache() = default;
  // Checks the head count the kernels take and lays out the device arrays.
  void lay_out(uint32_t room, void* stream);

  RaggedLayout layout_;
  std::vector<kernels::gpu::GpuBuffer<float>> k_, v_;  // L × (rows, D) device
  std::unique_ptr<GpuQuantBase> quant_;                // or null
};

}  // namespace kvzip::model
