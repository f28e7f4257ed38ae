// Private to the CPU GEMMs whose SIMD lanes are 16 tokens (kernels/cpu/qdot_avx512.cc: int8
// VNNI; kernels/cpu/bf16_gemm_avx512.cc: bf16): the blocking they share. A task holds a panel
// of at most 32 weight rows; for each tile of up to kTileVecs 16-token vectors and each chunk of
// the reduction dimension, micro-kernels of up to 4 rows x C vectors accumulate fp32 partial sums
// in a small buffer (so a chunk of activations stays in L1 while every row of the panel passes
// over it), and the finished tile is written to y (T, out) in row-major order.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvzip::kernels::cpu::detail {

inline constexpr uint32_t kPanelRows = 32;  // rows per panel (= qdot's rows per task)
inline constexpr uint32_t kMicroRows = 4;   // rows per micro-kernel

struct TileSpan {
  uint32_t rows = 0;     // panel rows (<= kPanelRows)
  uint32_t nv = 0;       // 16-token vectors of the activations
  uint32_t T = 0;        // tokens (lanes past T are padding and never written)
  uint32_t nk = 0;       // reduction steps (the micro-kernel's unit: groups, element pairs, ...)
  uint32_t k_chunk = 0;  // steps per chunk
  uint32_t tile_vecs = 0;
  float* y = nullptr;  // (T, ldy); the panel's row i is column row0 + i
  uint32_t ldy = 0, row0 = 0;
};

// Chunks of at most `most` steps, as even as can be (576 columns: one chunk of 18 groups, not
// 16 + 2, whose second pass would reload every accumulator for little work).
inline uint32_t even_chunk(uint32_t nk, uint32_t most) {
  const uint32_t n = (nk + most - 1) / most;
  return n ? (nk + n - 1) / n : most;
}

// micro(v0, C, i0, R, k0, k1, acc): acc (R, C, 16) += rows [i0, i0 + R) x vectors [v0, v0 + C)
// over steps [k0, k1); acc is laid out (row, vector, lane).
template <class Micro>
void run_tiles(const TileSpan& s, std::vector<float>& buf, Micro&& micro) {
  for (uint32_t v0 = 0; v0 < s.nv; v0 += s.tile_vecs) {
    const uint32_t C = std::min(s.tile_vecs, s.nv - v0);
    const size_t quad = size_t(kMicroRows) * C * 16;
    buf.assign(((s.rows + kMicroRows - 1) / kMicroRows) * quad, 0.0f);
    for (uint32_t k0 = 0; k0 < s.nk; k0 += s.k_chunk) {
      const uint32_t k1 = std::min(s.nk, k0 + s.k_chunk);
      for (uint32_t i0 = 0; i0 < s.rows; i0 += kMicroRows)
        micro(v0, C, i0, std::min(kMicroRows, s.rows - i0), k0, k1,
              buf.data() + (i0 / kMicroRows) * quad);
    }
    // A token at a time, the panel's rows as one contiguous run of y: each of its cache lines is
    // written whole, once. (Rows outermost wrote 16 lines ldy floats apart per row, each line
    // again for every row: y rarely fits in L2, and that loop took more time than the products.)
    const size_t rstep = size_t(C) * 16;  // one row to the next within a micro-kernel's block
    for (uint32_t c = 0; c < C; ++c)
      for (uint32_t l = 0; l < 16; ++l) {
        const uint32_t t = (v0 + c) * 16 + l;
        if (t >= s.T) break;
        float* yt = s.y + size_t(t) * s.ldy + s.row0;
        const float* b = buf.data() + c * 16 + l;
        uint32_t i0 = 0;
        for (; i0 + kMicroRows <= s.rows; i0 += kMicroRows, b += quad)
          for (uint32_t r = 0; r < kMicroRows; ++r) yt[i0 + r] = b[r * rstep];
        for (uint32_t r = 0; i0 + r < s.rows; ++r) yt[i0 + r] = b[r * rstep];
      }
  }
}

// Calls f.template operator()<R, C>() for runtime R in 1..4 and C in 1..kMaxC (kMaxC <= 4).
template <int kMaxC, class F>
void with_rc(uint32_t R, uint32_t C, F&& f) {
  auto by_c = [&]<int Rv>() {
    switch (std::min<uint32_t>(C, kMaxC)) {
      case 1: f.template operator()<Rv, 1>(); break;
      case 2:
        if constexpr (kMaxC >= 2) f.template operator()<Rv, 2>();
        break;
      case 3:
        if constexpr (kMaxC >= 3) f.template operator()<Rv, 3>();
        break;
      default:
        if constexpr (kMaxC >= 4) f.template operator()<Rv, 4>();
        break;
    }
  };
  switch (R) {
    case 1: by_c.template operator()<1>(); break;
    case 2: by_c.template operator()<2>(); break;
    case 3: by_c.template operator()<3>(); break;
    default: by_c.template operator()<4>(); break;
  }
}

}  // namespace kvzip::kernels::cpu::detail
