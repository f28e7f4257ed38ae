// CUDA causal GQA attention (twin of kernels/cpu/attention.cc), fp32 throughout. Two paths with
// the contract of kernels/attention.h (query token i sees rows [0, len - T + i] of its KV head):
//  - prefill: grid (T/32, Hq); a block owns 32 query rows of one head and walks 32-key tiles of
//    K and V through shared memory with an online softmax (tile.cuh), so memory is O(tile).
//  - decode: grid (splits, Hkv); a block owns one 256-row split of one KV head and serves all
//    T·G <= 16 query rows of the group (K/V read once per group), writing a partial (max, sum,
//    unnormalised output); decode_reduce combines the splits. Ragged heads simply have fewer
//    splits: blocks past a head's length exit at once.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/tile.cuh"

namespace kvzip::cuda {
namespace {

struct SpanTable {
  const float* k[kMaxKvHeads];  // (len, D) per KV head
  const float* v[kMaxKvHeads];
  uint32_t len[kMaxKvHeads];
};

struct AttnParams {
  const float* q;  // (T, Hq, D)
  float* out;      // (T, Hq, D)
  SpanTable kv;
  uint32_t T, Hq, Hkv;
  float scale;
};

constexpr int kPrefillRpw = tile::kRows / tile::kWarps;  // 8 query rows per warp
constexpr int kDecodeRpw = int(kDecodeRows) / tile::kWarps;  // 4 query rows per warp

template <int D>
constexpr size_t prefill_smem() {
  return size_t(3) * tile::kRows * tile::stride<D>() * sizeof(float);  // Q, K, V tiles
}

template <int D>
__global__ void __launch_bounds__(tile::kThreads) prefill_kernel(AttnParams p) {
  extern __shared__ float smem[];
  float* Qs = smem;
  float* Ks = Qs + tile::kRows * tile::stride<D>();
  float* Vs = Ks + tile::kRows * tile::stride<D>();
  const uint32_t hq = blockIdx.y, h = hq / (p.Hq / p.Hkv);
  const uint32_t i0 = blockIdx.x * tile::kRows;
  const uint32_t len = p.kv.len[h], n0 = len - p.T;
  const float* K = p.kv.k[h];
  const float* V = p.kv.v[h];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

  tile::load<D>(Qs, tile::kRows, [&](int r) -> const float* {
    const uint32_t i = i0 + r;
    return i < p.T ? p.q + (size_t(i) * p.Hq + hq) * D : nullptr;
  }, p.scale);
  const uint32_t i_last = min(p.T, i0 + tile::kRows) - 1;
  const uint32_t kend = n0 + i_last + 1;  // keys the block's last row sees (<= len)

  float m[kPrefillRpw], l[kPrefillRpw], acc[kPrefillRpw][D / 32];
#pragma unroll
  for (int k = 0; k < kPrefillRpw; ++k) {
    m[k] = -INFINITY;
    l[k] = 0.0f;
#pragma unroll
    for (int j = 0; j < D / 32; ++j) acc[k][j] = 0.0f;
  }
  for (uint32_t kb = 0; kb < kend; kb += tile::kRows) {
    __syncthreads();  // the previous tile's K/V are no longer read
    tile::load<D>(Ks, tile::kRows, [&](int r) -> const float* {
      return kb + r < kend ? K + size_t(kb + r) * D : nullptr;
    }, 1.0f);
    tile::load<D>(Vs, tile::kRows, [&](int r) -> const float* {
      return kb + r < kend ? V + size_t(kb + r) * D : nullptr;
    }, 1.0f);
    __syncthreads();  // Q (first pass), K and V visible to every warp
    float s[kPrefillRpw];
    tile::scores<D, kPrefillRpw>(Qs, Ks, warp * kPrefillRpw, s);
    const uint32_t j = kb + lane;
#pragma unroll
    for (int k = 0; k < kPrefillRpw; ++k) {
      const uint32_t i = min(i0 + warp * kPrefillRpw + k, p.T - 1);  // rows past T: harmless copy
      if (j > n0 + i) s[k] = -INFINITY;
    }
    tile::online_softmax<kPrefillRpw, D / 32>(s, m, l, acc);
    tile::accumulate_pv<D, kPrefillRpw>(Vs, s, acc);
  }
#pragma unroll
  for (int k = 0; k < kPrefillRpw; ++k) {
    const float sum = warp_sum(l[k]);
    const uint32_t i = i0 + warp * kPrefillRpw + k;
    if (i < p.T) {
      float* o = p.out + (size_t(i) * p.Hq + hq) * D;
#pragma unroll
      for (int j = 0; j < D / 32; ++j) o[lane + 32 * j] = acc[k][j] / sum;
    }
  }
}

// Partials of split s of KV head h, query row r (r = i·G + g): index (h · n_split + s) · 16 + r.
template <int D>
__global__ void __launch_bounds__(tile::kThreads)
    decode_kernel(AttnParams p, float* part_o, float2* part_ml, uint32_t n_split) {
  __shared__ float Qs[kDecodeRows * tile::stride<D>()];
  __shared__ float Ks[tile::kRows * tile::stride<D>()];
  __shared__ float Vs[tile::kRows * tile::stride<D>()];
  const uint32_t h = blockIdx.y, split = blockIdx.x;
  const uint32_t len = p.kv.len[h];
  const uint32_t k_begin = split * kDecodeSplit;
  if (k_begin >= len) return;  // the whole block leaves: this head is shorter
  const uint32_t k_stop = min(len, k_begin + kDecodeSplit);
  const uint32_t G = p.Hq / p.Hkv, R = p.T * G, n0 = len - p.T;
  const float* K = p.kv.k[h];
  const float* V = p.kv.v[h];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

  tile::load<D>(Qs, kDecodeRows, [&](int r) -> const float* {
    return uint32_t(r) < R ? p.q + (size_t(r / G) * p.Hq + h * G + r % G) * D : nullptr;
  }, p.scale);
  float m[kDecodeRpw], l[kDecodeRpw], acc[kDecodeRpw][D / 32];
#pragma unroll
  for (int k = 0; k < kDecodeRpw; ++k) {
    m[k] = -INFINITY;
    l[k] = 0.0f;
#pragma unroll
    for (int j = 0; j < D / 32; ++j) acc[k][j] = 0.0f;
  }
  for (uint32_t kb = k_begin; kb < k_stop; kb += tile::kRows) {
    __syncthreads();
    tile::load<D>(Ks, tile::kRows, [&](int r) -> const float* {
      return kb + r < k_stop ? K + size_t(kb + r) * D : nullptr;
    }, 1.0f);
    tile::load<D>(Vs, tile::kRows, [&](int r) -> const float* {
      return kb + r < k_stop ? V + size_t(kb + r) * D : nullptr;
    }, 1.0f);
    __syncthreads();
    float s[kDecodeRpw];
    tile::scores<D, kDecodeRpw>(Qs, Ks, warp * kDecodeRpw, s);
    const uint32_t j = kb + lane;
#pragma unroll
    for (int k = 0; k < kDecodeRpw; ++k) {
      const uint32_t r = warp * kDecodeRpw + k;
      const uint32_t i = r < R ? r / G : p.T - 1;
      if (j >= k_stop || j > n0 + i) s[k] = -INFINITY;
    }
    tile::online_softmax<kDecodeRpw, D / 32>(s, m, l, acc);
    tile::accumulate_pv<D, kDecodeRpw>(Vs, s, acc);
  }
#pragma unroll
  for (int k = 0; k < kDecodeRpw; ++k) {
    const float sum = warp_sum(l[k]);
    const uint32_t r = warp * kDecodeRpw + k;
    if (r < R) {
      const size_t idx = (size_t(h) * n_split + split) * kDecodeRows + r;
#pragma unroll
      for (int j = 0; j < D / 32; ++j) part_o[idx * D + lane + 32 * j] = acc[k][j];
      if (lane == 0) part_ml[idx] = make_float2(m[k], sum);
    }
  }
}

// grid (R, Hkv), D threads: out row r of head h = Σ_s e^(m_s - M) o_s / Σ_s e^(m_s - M) l_s.
template <int D>
__global__ void __launch_bounds__(D)
    decode_reduce(AttnParams p, const float* part_o, const float2* part_ml, uint32_t n_split) {
  const uint32_t r = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
  const uint32_t G = p.Hq / p.Hkv;
  const uint32_t splits = (p.kv.len[h] + kDecodeSplit - 1) / kDecodeSplit;
  const size_t base = size_t(h) * n_split * kDecodeRows + r;
  float M = -INFINITY;
  for (uint32_t s = 0; s < splits; ++s) M = fmaxf(M, part_ml[base + size_t(s) * kDecodeRows].x);
  float L = 0.0f, o = 0.0f;  // split 0 holds key 0, which every row sees: M is finite
  for (uint32_t s = 0; s < splits; ++s) {
    const size_t idx = base + size_t(s) * kDecodeRows;
    const float2 ml = part_ml[idx];
    const float w = expf(ml.x - M);  // 0 for a split the row sees nothing of (m = -inf)
    L += w * ml.y;
    o += w * part_o[idx * D + d];
  }
  const uint32_t i = r / G, hq = h * G + r % G;
  p.out[(size_t(i) * p.Hq + hq) * D + d] = o / L;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// The checks every path shares; fills the kernel parameters.
AttnParams make_params(const AttentionArgs& a) {
  KVZIP_ASSERT(a.q && a.out && a.kv && a.T > 0);
  KVZIP_ASSERT(a.Hkv > 0 && a.Hkv <= kMaxKvHeads && a.Hq % a.Hkv == 0);
  KVZIP_ASSERT(aligned16(a.q) && aligned16(a.out));
  AttnParams p{};
  p.q = a.q;
  p.out = a.out;
  p.T = a.T;
  p.Hq = a.Hq;
  p.Hkv = a.Hkv;
  p.scale = a.scale;
  for (uint32_t h = 0; h < a.Hkv; ++h) {
    KVZIP_ASSERT(a.kv[h].k && a.kv[h].v && a.kv[h].len >= a.T);
    KVZIP_ASSERT(aligned16(a.kv[h].k) && aligned16(a.kv[h].v));
    p.kv.k[h] = a.kv[h].k;
    p.kv.v[h] = a.kv[h].v;
    p.kv.len[h] = a.kv[h].len;
  }
  return p;
}

}  // namespace

void attention_prefill(const AttentionArgs& a, void* stream) {
  const AttnParams p = make_params(a);
  dispatch_head_dim(a.D, "attention_prefill", [&](auto d) {
    constexpr int D = decltype(d)::value;
    constexpr size_t smem = prefill_smem<D>();
    static const bool configured = [] {  // > 48 KiB of dynamic shared memory needs an opt-in
      KVZIP_CUDA_CHECK(cudaFuncSetAttribute(prefill_kernel<D>,
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
      return true;
    }();
    (void)configured;
    const dim3 grid(ceil_div(a.T, tile::kRows), a.Hq);
    prefill_kernel<D><<<grid, tile::kThreads, smem, as_stream(stream)>>>(p);
    KVZIP_CUDA_CHECK_LAUNCH();
  });
}

void attention_decode(const AttentionArgs& a, void* stream) {
  const AttnParams p = make_params(a);
  const uint32_t G = a.Hq / a.Hkv, R = a.T * G;
  KVZIP_ASSERT(R <= kDecodeRows);
  uint32_t max_len = 0;
  for (uint32_t h = 0; h < a.Hkv; ++h) max_len = std::max(max_len, a.kv[h].len);
  const uint32_t n_split = ceil_div(max_len, kDecodeSplit);
  dispatch_head_dim(a.D, "attention_decode", [&](auto d) {
    constexpr int D = decltype(d)::value;
    cudaStream_t s = as_stream(stream);
    const size_t slots = size_t(a.Hkv) * n_split * kDecodeRows;
    float* part_o = nullptr;
    float2* part_ml = nullptr;
    // Stream-ordered allocations come from the device's pool: no device-wide sync per decode.
    KVZIP_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&part_o), slots * D * sizeof(float), s));
    KVZIP_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&part_ml), slots * sizeof(float2), s));
    decode_kernel<D><<<dim3(n_split, a.Hkv), tile::kThreads, 0, s>>>(p, part_o, part_ml, n_split);
    cudaError_t launch = cudaGetLastError();
    if (launch == cudaSuccess) {
      decode_reduce<D><<<dim3(R, a.Hkv), D, 0, s>>>(p, part_o, part_ml, n_split);
      launch = cudaGetLastError();
    }
    KVZIP_CUDA_CHECK(cudaFreeAsync(part_o, s));
    KVZIP_CUDA_CHECK(cudaFreeAsync(part_ml, s));
    KVZIP_CUDA_CHECK(launch);
  });
}

void attention(const AttentionArgs& a, void* stream) {
  KVZIP_ASSERT(a.Hkv > 0 && a.Hq % a.Hkv == 0);
  if (uint64_t(a.T) * (a.Hq / a.Hkv) <= kDecodeRows) {
    attention_decode(a, stream);
  } else {
    attention_prefill(a, stream);
  }
}

}  // namespace kvzip::cuda
