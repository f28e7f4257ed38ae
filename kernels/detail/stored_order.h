// StoredOrder: row-mapped weight products computed over the stored rows, then put in canonical
// order. A GGUF's Q and K rows are stored in llama.cpp's rotary interleave and read through
// MatrixView::row_map (checkpoint/gguf_weights.cc); a row kernel following the map reads rows
// scattered two apart, with no sequential run for its prefetches, 2-8% slower over a whole decode
// token than the same kernel over the stored rows (bench/bench_decode.cc --kernels
// fast,fast-mapped). Every output row is one chain whatever rows share its tile, so the order
// changes no bits.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/matmul.h"

namespace kvzip::kernels::cpu::detail {

class StoredOrder {
 public:
  // The job to run in place of `a`: `a` itself when it has no row map; else the same weights over
  // their stored rows, writing scratch, without the bias (finish() puts both right).
  MatmulArgs take(const MatmulArgs& a) {
    if (!a.w.row_map) return a;
    taken_.push_back(a);
    scratch_.emplace_back(size_t(a.T) * a.w.rows);  // moving the vectors keeps their buffers
    MatmulArgs s = a;
    s.w.row_map = nullptr;
    s.y = scratch_.back().data();
    s.bias = nullptr;
    return s;
  }
  bool took(const MatmulArgs& a) const { return a.w.row_map != nullptr; }
  // After the jobs ran: each taken job's outputs in canonical order, plus its bias.
  void finish() {
    for (size_t i = 0; i < taken_.size(); ++i) {
      const MatmulArgs& a = taken_[i];
      const uint32_t rows = a.w.rows;
      for (uint32_t t = 0; t < a.T; ++t) {
        const float* src = scratch_[i].data() + size_t(t) * rows;
        float* dst = a.y + size_t(t) * rows;
        for (uint32_t r = 0; r < rows; ++r) dst[r] = src[a.w.row_map[r]];
        if (a.bias)
          for (uint32_t r = 0; r < rows; ++r) dst[r] += a.bias[r];
      }
    }
    taken_.clear();
    scratch_.clear();
  }

 private:
  std::vector<MatmulArgs> taken_;
  std::vector<std::vector<float>> scratch_;
};

}  // namespace kvzip::kernels::cpu::detail
