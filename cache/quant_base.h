// QuantBase: the compressed state of a q8/q4 .kvz on the host as the file stores it, never widened
// to f32 rows (spec/kvzip_format.md §12.1, kernels/kv_quant.h). Per layer and KV head the kept
// rows, in increasing position: first the head's f16 rows (positions below the file's
// kv_f16_below: the attention sink and template opener, a few per head), held here as f32 rows,
// then its quantized rows as codes with per-row group parameters and the head's channel scales
// (Hadamard-rotated codes stay rotated: layout().rotated, undone in attention, kernels/kv_quant.h).
// Read-only once built: a BranchCache (cache/branch_cache.h) attends to it through KvHeadView::
// quant while its question/answer rows go to a private f32 tail, so many readers may share one.
// Memory per kept row and block at D = 64, one group per row: q4 36 bytes, q8 68, f32 256.
// Invariants: every head's rows are [dense(l, h) f32 rows ; kept − dense quantized rows]; the
// segment pointers handed out (quant()) stay valid as long as the object, also across moves.
#pragma once
#include <cstdint>
#include <vector>

#include "cache/kv_cache.h"
#include "kernels/kv_quant.h"

namespace kvzip::model {

// One layer's rows, head-major within every array. R = Σ head_rows, F = Σ head_dense.
struct QuantBaseLayer {
  std::vector<uint32_t> head_rows;           // (Hkv) kept rows per KV head
  std::vector<uint32_t> head_dense;          // (Hkv) of those, the f32 rows (each head's first)
  std::vector<uint32_t> positions;           // (R) original positions, increasing within a head
  std::vector<float> dense_k, dense_v;       // (F, D) the f32 rows
  std::vector<float> scale_k, scale_v;       // (Hkv, D) channel scales
  std::vector<uint16_t> params_k, params_v;  // (R − F, D/Gs, 2) f16 bits: scale, minimum
  std::vector<uint8_t> codes_k, codes_v;     // (R − F, D·bits/8)
};

class QuantBase {
 public:
  // Takes the L layers; Errc::invalid_argument when a size does not match shape and layout.
  QuantBase(CacheShape shape, uint32_t logical_length, kernels::KvQuantLayout layout,
            std::vector<QuantBaseLayer> layers);
  QuantBase(QuantBase&&) noexcept = default;
  QuantBase& operator=(QuantBase&&) noexcept = default;
  QuantBase(const QuantBase&) = delete;  // the segments point into the buffers
  QuantBase& operator=(const QuantBase&) = delete;

  CacheShape shape() const { return shape_; }
  const kernels::KvQuantLayout& layout() const { return layout_; }
  // Logical length of the compressed state (the uncompressed document length): the position of
  // the first appended token.
  uint32_t base_length() const { return length_; }

  uint32_t kept(uint32_t layer, uint32_t kv_head) const { return heads_[at(layer, kv_head)].kept; }
  uint32_t dense(uint32_t layer, uint32_t kv_head) const {
    return heads_[at(layer, kv_head)].dense;
  }
  uint64_t kept_total() const;  // Σ kept rows over (l, h)
  // The head's f32 rows (dense, D) and the positions of all its rows (kept).
  const float* dense_k(uint32_t layer, uint32_t kv_head) const;
  const float* dense_v(uint32_t layer, uint32_t kv_head) const;
  const uint32_t* positions(uint32_t layer, uint32_t kv_head) const;
  // The head's quantized rows (kept − dense of them), or null when it has none.
  const kernels::KvQuantSegment* quant(uint32_t layer, uint32_t kv_head) const;
  // Bytes of K and V held: f32 rows, channel scales, group parameters and codes (positions are
  // not counted, as RaggedKvCache::bytes_kept does not count them).
  uint64_t bytes_kept() const;

 private:
  struct Head {
    uint32_t kept = 0, dense = 0;
    uint64_t row0 = 0, dense0 = 0;  // first row of the head in the layer, first f32 row
  };
  size_t at(uint32_t layer, uint32_t kv_head) const;  // checked index into heads_

  CacheShape shape_;
  uint32_t length_ = 0;
  kernels::KvQuantLayout layout_;
  std::vector<QuantBaseLayer> layers_;         // (L)
  std::vector<Head> heads_;                    // (L·Hkv)
  std::vector<kernels::KvQuantSegment> segs_;  // (L·Hkv) views into layers_
};

}  // namespace kvzip::model
