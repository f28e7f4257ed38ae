// Building blocks of the CUDA attention kernels (attention.cu, attention_score.cu): 32-row tiles
// of head vectors in shared memory and the per-warp online softmax. Layout contract shared by all
// of them: a block has 4 warps (128 threads); a tile holds 32 rows of D floats with a row stride
// of D + 1 (the pad puts lane c's row c on bank (c + d) % 32, so column-wise reads by 32 lanes
// never conflict); in the score step warp w owns query rows [w·RPW, (w+1)·RPW) and lane c owns
// key c of the tile; in the P·V step lane c owns output dims c, c + 32, ... (D/32 of them).
// Every function here is called by all 32 lanes of a warp (they use full-mask shuffles).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace kvzip::kernels::cuda::tile {

constexpr int kRows = 32;  // rows of a tile (query rows or keys)
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;

template <int D>
__host__ __device__ constexpr int stride() {
  return D + 1;
}

// dst[r][0..D) = mul · src(r)[0..D) for r < rows, zeros where src(r) is nullptr. Every thread of
// the block takes part; rows must be 16-byte aligned (float4 loads).
template <int D, class RowPtr>
__device__ __forceinline__ void load(float* dst, int rows, RowPtr src, float mul) {
  static_assert(D % 4 == 0, "float4 rows");
  constexpr int kVec = D / 4;
  for (int idx = threadIdx.x; idx < rows * kVec; idx += blockDim.x) {
    const int r = idx / kVec, c = idx - r * kVec;
    const float* s = src(r);
    float4 x = s ? __ldg(reinterpret_cast<const float4*>(s) + c) : make_float4(0.f, 0.f, 0.f, 0.f);
    float* d = dst + r * stride<D>() + 4 * c;
    d[0] = x.x * mul;
    d[1] = x.y * mul;
    d[2] = x.z * mul;
    d[3] = x.w * mul;
  }
}

// s[k] = Q[q_row0 + k] · K[lane] for k < RPW.
template <int D, int RPW>
__device__ __forceinline__ void scores(const float* Qs, const float* Ks, int q_row0,
                                       float (&s)[RPW]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int k = 0; k < RPW; ++k) s[k] = 0.0f;
  const float* kr = Ks + lane * stride<D>();
  const float* qr = Qs + q_row0 * stride<D>();
#pragma unroll 8
  for (int d = 0; d < D; ++d) {
    const float kv = kr[d];
#pragma unroll
    for (int k = 0; k < RPW; ++k) s[k] = fmaf(qr[k * stride<D>() + d], kv, s[k]);
  }
}

// One tile of the online softmax for RPW rows. On entry s holds the tile's masked logits (-inf
// where masked); on exit s holds the unnormalised probabilities exp(s - m), m the running max
// (uniform over the warp), l the lane's share of the running sum (sum over lanes = the row's
// sum), and acc (if DW > 0) rescaled by exp(m_old - m_new). A row with every key masked so far
// keeps m = -inf, l = 0, acc = 0 and produces no NaN.
template <int RPW, int DW>
__device__ __forceinline__ void online_softmax(float (&s)[RPW], float (&m)[RPW], float (&l)[RPW],
                                               float (&acc)[RPW][DW > 0 ? DW : 1]) {
#pragma unroll
  for (int k = 0; k < RPW; ++k) {
    const float m_new = fmaxf(m[k], warp_max(s[k]));
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;
    const float alpha = expf(m[k] - m_use);  // 0 when m[k] == -inf
    s[k] = expf(s[k] - m_use);               // 0 for masked keys
    l[k] = l[k] * alpha + s[k];
    m[k] = m_new;
    if constexpr (DW > 0) {
#pragma unroll
      for (int j = 0; j < DW; ++j) acc[k][j] *= alpha;
    }
  }
}

// acc[k][j] += Σ_c p_c[k] · V[c][lane + 32 j], p_c[k] taken from lane c's s[k].
template <int D, int RPW>
__device__ __forceinline__ void accumulate_pv(const float* Vs, const float (&p)[RPW],
                                              float (&acc)[RPW][D / 32]) {
  const int lane = threadIdx.x & 31;
#pragma unroll 4
  for (int c = 0; c < kRows; ++c) {
    float vv[D / 32];
#pragma unroll
    for (int j = 0; j < D / 32; ++j) vv[j] = Vs[c * stride<D>() + lane + 32 * j];
#pragma unroll
    for (int k = 0; k < RPW; ++k) {
      const float pk = __shfl_sync(0xffffffffu, p[k], c);
#pragma unroll
      for (int j = 0; j < D / 32; ++j) acc[k][j] = fmaf(pk, vv[j], acc[k][j]);
    }
  }
}

}  // namespace kvzip::kernels::cuda::tile
