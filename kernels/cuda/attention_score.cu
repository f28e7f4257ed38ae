// The KVzip score kernels (kernels/attention_score.h): lse_kernel computes, for every query row
// (token i, query head hq), log Σ exp(logit) over that row's visible local key axis with the
// online max/sum of tile.cuh; colmax_kernel then holds one 32-column block of keys of one KV head
// in shared memory and streams every query row of the group past it in 32-row tiles, keeping per
// column the max of exp(logit - lse). Each output column has exactly one writer per launch, so the
// final max-combine with earlier calls needs no atomics.
#include <cuda_runtime.h>

#include <string>

#include "kernels/attention_score.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/tile.cuh"

namespace kvzip::kernels::cuda {
namespace {

struct AxisTable {
  const float* k[kMaxKvHeads][3];
  uint32_t n[kMaxKvHeads][3];
  uint32_t fixed[kMaxKvHeads];  // rows of the ranges before the causal one
  uint32_t causal_base[kMaxKvHeads];
  uint32_t n_ranges[kMaxKvHeads];
};

struct ScoreParams {
  const float* q;  // (T, Hq, D)
  AxisTable ax;
  uint32_t T, Hq, Hkv, col0, col1;
  float scale;
  float* out;
  uint64_t out_stride;
};

constexpr int kRpw = tile::kRows / tile::kWarps;  // 8

// Row `a` of head h's key axis (ranges in order; the last one is open-ended).
template <int D>
__device__ __forceinline__ const float* axis_row(const AxisTable& ax, uint32_t h, uint32_t a) {
  const uint32_t last = ax.n_ranges[h] - 1;
  for (uint32_t r = 0; r < last; ++r) {
    if (a < ax.n[h][r]) return ax.k[h][r] + size_t(a) * D;
    a -= ax.n[h][r];
  }
  return ax.k[h][last] + size_t(a) * D;
}

// grid (T/32, Hq): lse[i · Hq + hq].
template <int D>
__global__ void __launch_bounds__(tile::kThreads) lse_kernel(ScoreParams p, float* lse) {
  __shared__ float Qs[tile::kRows * tile::stride<D>()];
  __shared__ float Ks[tile::kRows * tile::stride<D>()];
  const uint32_t hq = blockIdx.y, h = hq / (p.Hq / p.Hkv);
  const uint32_t i0 = blockIdx.x * tile::kRows;
  const uint32_t base = p.ax.fixed[h] + p.ax.causal_base[h];  // token i sees base + i + 1 keys
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  tile::load<D>(
      Qs, tile::kRows,
      [&](int r) -> const float* {
        const uint32_t i = i0 + r;
        return i < p.T ? p.q + (size_t(i) * p.Hq + hq) * D : nullptr;
      },
      p.scale);
  const uint32_t kend = base + min(p.T, i0 + tile::kRows);
  float m[kRpw], l[kRpw], none[kRpw][1];
#pragma unroll
  for (int k = 0; k < kRpw; ++k) {
    m[k] = -INFINITY;
    l[k] = 0.0f;
  }
  for (uint32_t kb = 0; kb < kend; kb += tile::kRows) {
    __syncthreads();
    tile::load<D>(
        Ks, tile::kRows,
        [&](int r) -> const float* {
          return kb + r < kend ? axis_row<D>(p.ax, h, kb + r) : nullptr;
        },
        1.0f);
    __syncthreads();
    float s[kRpw];
    tile::scores<D, kRpw>(Qs, Ks, warp * kRpw, s);
    const uint32_t j = kb + lane;
#pragma unroll
    for (int k = 0; k < kRpw; ++k) {
      const uint32_t i = min(i0 + warp * kRpw + k, p.T - 1);
      if (j > base + i) s[k] = -INFINITY;
    }
    tile::online_softmax<kRpw, 0>(s, m, l, none);
  }
#pragma unroll
  for (int k = 0; k < kRpw; ++k) {
    const float sum = warp_sum(l[k]);
    const uint32_t i = i0 + warp * kRpw + k;
    if (lane == 0 && i < p.T) lse[size_t(i) * p.Hq + hq] = m[k] + logf(sum);
  }
}

// grid ((col1 - col0)/32, Hkv): the max over the group's rows of every column in the block.
template <int D>
__global__ void __launch_bounds__(tile::kThreads) colmax_kernel(ScoreParams p, const float* lse) {
  __shared__ float Ks[tile::kRows * tile::stride<D>()];
  __shared__ float Qs[tile::kRows * tile::stride<D>()];
  __shared__ float Ls[tile::kRows];
  __shared__ float red[tile::kWarps][32];
  const uint32_t h = blockIdx.y, G = p.Hq / p.Hkv, R = p.T * G;
  const uint32_t c0 = p.col0 + blockIdx.x * tile::kRows;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  tile::load<D>(
      Ks, tile::kRows,
      [&](int r) -> const float* {
        return c0 + r < p.col1 ? axis_row<D>(p.ax, h, c0 + r) : nullptr;
      },
      1.0f);
  float best = 0.0f;  // probabilities are >= 0
  for (uint32_t rb = 0; rb < R; rb += tile::kRows) {
    __syncthreads();  // K visible (first pass); previous Q/L tile no longer read
    tile::load<D>(
        Qs, tile::kRows,
        [&](int r) -> const float* {
          const uint32_t row = rb + r;
          return row < R ? p.q + (size_t(row / G) * p.Hq + h * G + row % G) * D : nullptr;
        },
        p.scale);
    if (threadIdx.x < tile::kRows) {
      const uint32_t row = rb + threadIdx.x;
      Ls[threadIdx.x] = row < R ? lse[size_t(row / G) * p.Hq + h * G + row % G] : INFINITY;
    }
    __syncthreads();
    float s[kRpw];
    tile::scores<D, kRpw>(Qs, Ks, warp * kRpw, s);
#pragma unroll
    for (int k = 0; k < kRpw; ++k) best = fmaxf(best, expf(s[k] - Ls[warp * kRpw + k]));
  }
  red[warp][lane] = best;
  __syncthreads();
  if (warp == 0) {
#pragma unroll
    for (int w = 1; w < tile::kWarps; ++w) best = fmaxf(best, red[w][lane]);
    const uint32_t c = c0 + lane;
    if (c < p.col1) {
      float* o = p.out + h * p.out_stride + (c - p.col0);
      *o = fmaxf(*o, best);
    }
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

ScoreParams make_params(const AttentionScoreArgs& a) {
  KVZIP_ASSERT(a.q && a.axes && a.out && a.T > 0 && a.col0 < a.col1);
  KVZIP_ASSERT(a.Hkv > 0 && a.Hkv <= kMaxKvHeads && a.Hq % a.Hkv == 0 && aligned16(a.q));
  ScoreParams p{};
  p.q = a.q;
  p.T = a.T;
  p.Hq = a.Hq;
  p.Hkv = a.Hkv;
  p.col0 = a.col0;
  p.col1 = a.col1;
  p.scale = a.scale;
  p.out = a.out;
  p.out_stride = a.out_stride;
  for (uint32_t h = 0; h < a.Hkv; ++h) {
    const ScoreKeyAxis& ax = a.axes[h];
    KVZIP_ASSERT(ax.n_ranges >= 1 && ax.n_ranges <= 3);
    uint32_t fixed = 0;
    for (uint32_t r = 0; r < ax.n_ranges; ++r) {
      KVZIP_ASSERT(ax.ranges[r].k && aligned16(ax.ranges[r].k));
      p.ax.k[h][r] = ax.ranges[r].k;
      p.ax.n[h][r] = ax.ranges[r].n;
      if (r + 1 < ax.n_ranges) fixed += ax.ranges[r].n;
    }
    // Columns must be visible to every row (inside the fixed ranges), the causal range must be
    // long enough for the last token.
    KVZIP_ASSERT(a.col1 <= fixed);
    KVZIP_ASSERT(ax.ranges[ax.n_ranges - 1].n >= ax.causal_base + a.T);
    p.ax.fixed[h] = fixed;
    p.ax.causal_base[h] = ax.causal_base;
    p.ax.n_ranges[h] = ax.n_ranges;
  }
  return p;
}

}  // namespace

void attention_score_max(const AttentionScoreArgs& a, void* stream) {
  const ScoreParams p = make_params(a);
  dispatch_head_dim(a.D, "attention_score_max", [&](auto d) {
    constexpr int D = decltype(d)::value;
    cudaStream_t s = as_stream(stream);
    float* lse = nullptr;
    KVZIP_CUDA_CHECK(
        cudaMallocAsync(reinterpret_cast<void**>(&lse), size_t(a.T) * a.Hq * sizeof(float), s));
    lse_kernel<D><<<dim3(ceil_div(a.T, tile::kRows), a.Hq), tile::kThreads, 0, s>>>(p, lse);
    cudaError_t launch = cudaGetLastError();
    if (launch == cudaSuccess) {
      const dim3 grid(ceil_div(a.col1 - a.col0, tile::kRows), a.Hkv);
      colmax_kernel<D><<<grid, tile::kThreads, 0, s>>>(p, lse);
      launch = cudaGetLastError();
    }
    KVZIP_CUDA_CHECK(cudaFreeAsync(lse, s));
    KVZIP_CUDA_CHECK(launch);
  });
}

}  // namespace kvzip::kernels::cuda
