// CUDA causal GQA attention (twin of kernels/cpu/attention.cc), fp32 throughout. Two paths with
// the contract of kernels/attention.h (query token i sees rows [0, len - T + i] of its KV head):
//  - prefill: grid (T/32, Hq); a block owns 32 query rows of one head and walks 32-key tiles of
//    K and V through shared memory with an online softmax (tile.cuh), so memory is O(tile).
//  - decode (split-K): grid (splits, Hkv, row groups); a block owns one split (>= 256 rows) of
//    one KV head and serves 16 of the T·G <= 128 query rows of the group (K/V read once per row
//    group), writing a partial (max, sum, unnormalised output); decode_reduce combines, per query
//    row, the splits that row sees. Ragged heads simply have fewer splits: blocks past a head's
//    length, or past what every row of their group may see, exit at once. A question of 10-40
//    tokens over a long compressed cache takes this path, so the grid grows with the cache
//    instead of being Hq blocks that each walk all of it.
// Quantized rows (KvSpan::quant: a q8/q4 base kept as the file stores it) are attended by the
// split-K path only: decode_quant_kernel gives their splits partials of the same form (every
// query row sees every quantized row, so there is no mask but the end of the rows), stored after
// the head's f32 splits, and decode_reduce combines both kinds. It dequantizes a 32-row tile of K
// and of V at a time into shared memory (kv_quant.cuh: the CPU's c·fma(s, q, m)); for rotated
// rows it works in the rotated basis, as the CPU does: the query is rotated once (q·x =
// (H·q)·(H·x)) and the partial output once (Σ p·x = H·Σ p·(H·x)), never a stored row. A block
// of more than kSplitMaxRows query rows over quantized spans is cut into blocks of whole tokens
// that each take the split path (token i of block [t0, t1) sees what it sees in the whole call:
// the span shortened by T − t1 rows).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/error.h"
#include "kernels/attention.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kv_quant.cuh"
#include "kernels/cuda/tile.cuh"

namespace kvzip::kernels::cuda {
namespace {

struct SpanTable {
  const float* k[kMaxKvHeads];  // (len, D) per KV head
  const float* v[kMaxKvHeads];
  uint32_t len[kMaxKvHeads];
  uint32_t qrows[kMaxKvHeads];  // quantized rows ahead of the f32 ones (KvSpan::quant), or 0
};

// The quantized rows of every KV head of one call (kernels/kv_quant.h): one layout (one file's),
// per head its channel scales (D), parameter words (qrows, words) and codes (qrows, code_bytes).
struct QuantTable {
  quant::DevLayout layout;
  const float* ck[kMaxKvHeads];
  const float* cv[kMaxKvHeads];
  const uint16_t* pk[kMaxKvHeads];
  const uint16_t* pv[kMaxKvHeads];
  const uint8_t* qk[kMaxKvHeads];
  const uint8_t* qv[kMaxKvHeads];
};

struct AttnParams {
  const float* q;  // (T, Hq, D)
  float* out;      // (T, Hq, D)
  SpanTable kv;
  uint32_t T, Hq, Hkv;
  float scale;
};

constexpr int kPrefillRpw = tile::kRows / tile::kWarps;      // 8 query rows per warp
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

  tile::load<D>(
      Qs, tile::kRows,
      [&](int r) -> const float* {
        const uint32_t i = i0 + r;
        return i < p.T ? p.q + (size_t(i) * p.Hq + hq) * D : nullptr;
      },
      p.scale);
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
    tile::load<D>(
        Ks, tile::kRows,
        [&](int r) -> const float* { return kb + r < kend ? K + size_t(kb + r) * D : nullptr; },
        1.0f);
    tile::load<D>(
        Vs, tile::kRows,
        [&](int r) -> const float* { return kb + r < kend ? V + size_t(kb + r) * D : nullptr; },
        1.0f);
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

// Geometry of one split-K call. Partials of split s of KV head h, query row r (r = i·G + g):
// index (h · (n_split + n_quant) + s) · r_pad + r, r_pad = 16 · row groups; the f32 splits are
// s < n_split, the quantized ones s = n_split + (split of the quantized rows).
struct SplitGeom {
  uint32_t n_split;    // splits of the longest head's f32 rows
  uint32_t split_len;  // rows per split, a multiple of the tile
  uint32_t r_pad;      // query rows rounded up to whole row groups
  uint32_t n_quant;    // splits of the longest head's quantized rows (0: none in the call)
  uint32_t quant_len;  // quantized rows per split
};

__host__ __device__ inline size_t slot(const SplitGeom& sg, uint32_t h, uint32_t s) {
  return (size_t(h) * (sg.n_split + sg.n_quant) + s) * sg.r_pad;
}

// What the two split-K kernels (f32 rows, quantized rows) share: the block's 16 query rows of the
// GQA group (row rr = i·G + g is token i, query head h·G + g; zeros past R = T·G) scaled into Qs,
// the running softmax state of each warp's rows, and the partial (unnormalised output, max, sum)
// of each row below R at base + row.
template <int D>
__device__ __forceinline__ void load_row_group(float* Qs, const AttnParams& p, uint32_t h,
                                               uint32_t r0) {
  const uint32_t G = p.Hq / p.Hkv, R = p.T * G;
  tile::load<D>(
      Qs, kDecodeRows,
      [&](int r) -> const float* {
        const uint32_t rr = r0 + r;
        return rr < R ? p.q + (size_t(rr / G) * p.Hq + h * G + rr % G) * D : nullptr;
      },
      p.scale);
}

template <int D>
__device__ __forceinline__ void clear_rows(float (&m)[kDecodeRpw], float (&l)[kDecodeRpw],
                                           float (&acc)[kDecodeRpw][D / 32]) {
#pragma unroll
  for (int k = 0; k < kDecodeRpw; ++k) {
    m[k] = -INFINITY;
    l[k] = 0.0f;
#pragma unroll
    for (int j = 0; j < D / 32; ++j) acc[k][j] = 0.0f;
  }
}

template <int D>
__device__ __forceinline__ void store_partials(const float (&m)[kDecodeRpw],
                                               const float (&l)[kDecodeRpw],
                                               const float (&acc)[kDecodeRpw][D / 32], uint32_t r0,
                                               uint32_t R, size_t base, float* part_o,
                                               float2* part_ml) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
  for (int k = 0; k < kDecodeRpw; ++k) {
    const float sum = warp_sum(l[k]);
    const uint32_t r = r0 + warp * kDecodeRpw + k;
    if (r < R) {
      const size_t idx = base + r;
#pragma unroll
      for (int j = 0; j < D / 32; ++j) part_o[idx * D + lane + 32 * j] = acc[k][j];
      if (lane == 0) part_ml[idx] = make_float2(m[k], sum);
    }
  }
}

template <int D>
__global__ void __launch_bounds__(tile::kThreads)
    decode_kernel(AttnParams p, float* part_o, float2* part_ml, SplitGeom sg) {
  __shared__ float Qs[kDecodeRows * tile::stride<D>()];
  __shared__ float Ks[tile::kRows * tile::stride<D>()];
  __shared__ float Vs[tile::kRows * tile::stride<D>()];
  const uint32_t h = blockIdx.y, split = blockIdx.x, r0 = blockIdx.z * kDecodeRows;
  const uint32_t len = p.kv.len[h];
  const uint32_t G = p.Hq / p.Hkv, R = p.T * G, n0 = len - p.T;
  const uint32_t k_begin = split * sg.split_len;
  // The whole block leaves when this head is shorter, or when even the group's last row (the one
  // that sees most) sees nothing of this split: decode_reduce reads only splits a row sees.
  if (k_begin >= len || n0 + (min(R, r0 + kDecodeRows) - 1) / G < k_begin) return;
  const uint32_t k_stop = min(len, k_begin + sg.split_len);
  const float* K = p.kv.k[h];
  const float* V = p.kv.v[h];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

  load_row_group<D>(Qs, p, h, r0);
  float m[kDecodeRpw], l[kDecodeRpw], acc[kDecodeRpw][D / 32];
  clear_rows<D>(m, l, acc);
  for (uint32_t kb = k_begin; kb < k_stop; kb += tile::kRows) {
    __syncthreads();
    tile::load<D>(
        Ks, tile::kRows,
        [&](int r) -> const float* { return kb + r < k_stop ? K + size_t(kb + r) * D : nullptr; },
        1.0f);
    tile::load<D>(
        Vs, tile::kRows,
        [&](int r) -> const float* { return kb + r < k_stop ? V + size_t(kb + r) * D : nullptr; },
        1.0f);
    __syncthreads();
    float s[kDecodeRpw];
    tile::scores<D, kDecodeRpw>(Qs, Ks, warp * kDecodeRpw, s);
    const uint32_t j = kb + lane;
#pragma unroll
    for (int k = 0; k < kDecodeRpw; ++k) {
      const uint32_t r = r0 + warp * kDecodeRpw + k;
      const uint32_t i = r < R ? r / G : p.T - 1;  // rows past R: harmless copy, never stored
      if (j >= k_stop || j > n0 + i) s[k] = -INFINITY;
    }
    tile::online_softmax<kDecodeRpw, D / 32>(s, m, l, acc);
    tile::accumulate_pv<D, kDecodeRpw>(Vs, s, acc);
  }
  store_partials<D>(m, l, acc, r0, R, slot(sg, h, split), part_o, part_ml);
}

// dst (32 rows, stride) <- the stored values of quantized rows [row0, row0 + 32) (zeros past
// `stop`): c·fma(s, q, m), for rotated rows still in the rotated basis.
template <int D>
__device__ __forceinline__ void load_quant_tile(float* dst, uint32_t row0, uint32_t stop,
                                                const float* c, const uint16_t* params,
                                                const uint8_t* codes, const quant::DevLayout& l) {
  for (uint32_t idx = threadIdx.x; idx < uint32_t(tile::kRows) * D; idx += blockDim.x) {
    const uint32_t r = idx / D, j = idx % D, row = row0 + r;
    dst[r * tile::stride<D>() + j] =
        row < stop ? quant::stored_value(c, params + size_t(row) * l.words,
                                         codes + size_t(row) * l.code_bytes, j, l)
                   : 0.0f;
  }
}

// decode_kernel's twin for the quantized rows: grid (quantized splits, Hkv, row groups); block
// (s, h, z) attends query rows [16z, 16z + 16) of head h's group to quantized rows
// [s·quant_len, (s + 1)·quant_len) and writes the partial at slot n_split + s.
template <int D>
__global__ void __launch_bounds__(tile::kThreads)
    decode_quant_kernel(AttnParams p, QuantTable qt, float* part_o, float2* part_ml, SplitGeom sg) {
  __shared__ float Qs[kDecodeRows * tile::stride<D>()];
  __shared__ float Ks[tile::kRows * tile::stride<D>()];
  __shared__ float Vs[tile::kRows * tile::stride<D>()];
  const uint32_t h = blockIdx.y, split = blockIdx.x, r0 = blockIdx.z * kDecodeRows;
  const uint32_t rows = p.kv.qrows[h];
  const uint32_t G = p.Hq / p.Hkv, R = p.T * G;
  const uint32_t k_begin = split * sg.quant_len;
  if (k_begin >= rows) return;  // every query row sees every quantized row: no causal exit
  const uint32_t k_stop = min(rows, k_begin + sg.quant_len);
  const quant::DevLayout& l = qt.layout;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

  load_row_group<D>(Qs, p, h, r0);
  if (l.rotated) quant::hadamard_rows(Qs, kDecodeRows, tile::stride<D>(), D, l.rot_scale);  // H·q
  float m[kDecodeRpw], s_l[kDecodeRpw], acc[kDecodeRpw][D / 32];
  clear_rows<D>(m, s_l, acc);
  for (uint32_t kb = k_begin; kb < k_stop; kb += tile::kRows) {
    __syncthreads();  // the previous tile (and, the first time, Qs's rotation) is done with
    load_quant_tile<D>(Ks, kb, k_stop, qt.ck[h], qt.pk[h], qt.qk[h], l);
    load_quant_tile<D>(Vs, kb, k_stop, qt.cv[h], qt.pv[h], qt.qv[h], l);
    __syncthreads();
    float s[kDecodeRpw];
    tile::scores<D, kDecodeRpw>(Qs, Ks, warp * kDecodeRpw, s);
    const uint32_t j = kb + lane;
#pragma unroll
    for (int k = 0; k < kDecodeRpw; ++k)
      if (j >= k_stop) s[k] = -INFINITY;
    tile::online_softmax<kDecodeRpw, D / 32>(s, m, s_l, acc);
    tile::accumulate_pv<D, kDecodeRpw>(Vs, s, acc);
  }
  if (l.rotated) {    // acc holds Σ p·(H·v): the output is H times it, rotated through Qs
    __syncthreads();  // every warp is done reading Qs
#pragma unroll
    for (int k = 0; k < kDecodeRpw; ++k)
#pragma unroll
      for (int j = 0; j < D / 32; ++j)
        Qs[(warp * kDecodeRpw + k) * tile::stride<D>() + lane + 32 * j] = acc[k][j];
    quant::hadamard_rows(Qs, kDecodeRows, tile::stride<D>(), D, l.rot_scale);
#pragma unroll
    for (int k = 0; k < kDecodeRpw; ++k)
#pragma unroll
      for (int j = 0; j < D / 32; ++j)
        acc[k][j] = Qs[(warp * kDecodeRpw + k) * tile::stride<D>() + lane + 32 * j];
  }
  store_partials<D>(m, s_l, acc, r0, R, slot(sg, h, sg.n_split + split), part_o, part_ml);
}

// grid (R, Hkv), D threads: out row r of head h = Σ_s e^(m_s - M) o_s / Σ_s e^(m_s - M) l_s over
// the splits s that row r sees (those holding a key <= its causal limit n0 + i, and every split
// of the head's quantized rows); each of them has at least one visible key, so every m_s read is
// finite and L > 0.
template <int D>
__global__ void __launch_bounds__(D)
    decode_reduce(AttnParams p, const float* part_o, const float2* part_ml, SplitGeom sg) {
  const uint32_t r = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
  const uint32_t G = p.Hq / p.Hkv, i = r / G;
  const uint32_t limit = p.kv.len[h] - p.T + i;  // last key row r sees
  const uint32_t splits = limit / sg.split_len + 1;
  const uint32_t qsplits = sg.n_quant ? (p.kv.qrows[h] + sg.quant_len - 1) / sg.quant_len : 0;
  const size_t base = slot(sg, h, 0) + r;
  // Split s of the sequence [f32 splits seen; quantized splits] as a partial index.
  auto at = [&](uint32_t s) {
    return base + size_t(s < splits ? s : sg.n_split + (s - splits)) * sg.r_pad;
  };
  float M = -INFINITY;
  for (uint32_t s = 0; s < splits + qsplits; ++s) M = fmaxf(M, part_ml[at(s)].x);
  float L = 0.0f, o = 0.0f;
  for (uint32_t s = 0; s < splits + qsplits; ++s) {
    const size_t idx = at(s);
    const float2 ml = part_ml[idx];
    const float w = expf(ml.x - M);
    L += w * ml.y;
    o += w * part_o[idx * D + d];
  }
  const uint32_t hq = h * G + r % G;
  p.out[(size_t(i) * p.Hq + hq) * D + d] = o / L;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// The checks every path shares; fills the kernel parameters. The contract's `out == nullptr` with
// `local` statistics is refused here too (check_cuda_attention): there is no statistics kernel.
AttnParams make_params(const AttentionArgs& a) {
  check_cuda_attention(a);
  KVZIP_ASSERT(a.q && a.kv && a.T > 0);
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
    p.kv.qrows[h] = a.kv[h].quant ? a.kv[h].quant->rows() : 0;
  }
  return p;
}

bool any_quantized(const AttentionArgs& a) {
  for (uint32_t h = 0; h < a.Hkv; ++h)
    if (a.kv[h].quant && a.kv[h].quant->rows() > 0) return true;
  return false;
}

bool same_layout(const KvQuantLayout& x, const KvQuantLayout& y) {
  return x.bits == y.bits && x.D == y.D && x.group == y.group && x.rotated == y.rotated &&
         x.byte_params == y.byte_params;
}

// The quantized rows of a call with some (any_quantized): every segment in one layout of head
// dim D, K and V the same rows, device pointers set.
QuantTable make_quant_table(const AttentionArgs& a) {
  QuantTable t{};
  const KvQuantLayout* layout = nullptr;
  for (uint32_t h = 0; h < a.Hkv; ++h) {
    const KvQuantSegment* q = a.kv[h].quant;
    if (!q || q->rows() == 0) continue;
    KVZIP_ASSERT(q->k.rows == q->v.rows && q->k.rows <= 0xffffffffu);
    KVZIP_ASSERT(same_layout(q->k.layout, q->v.layout) && q->k.layout.D == a.D);
    KVZIP_ASSERT(!layout || same_layout(*layout, q->k.layout));  // one file's rows: one layout
    KVZIP_ASSERT(q->k.channel_scale && q->k.params && q->k.codes && q->v.channel_scale &&
                 q->v.params && q->v.codes);
    layout = &q->k.layout;
    t.ck[h] = q->k.channel_scale;
    t.cv[h] = q->v.channel_scale;
    t.pk[h] = q->k.params;
    t.pv[h] = q->v.params;
    t.qk[h] = q->k.codes;
    t.qv[h] = q->v.codes;
  }
  KVZIP_ASSERT(layout != nullptr);
  t.layout = quant::dev_layout(*layout);
  return t;
}

}  // namespace

void attention_prefill(const AttentionArgs& a, void* stream) {
  const AttnParams p = make_params(a);
  if (any_quantized(a))
    throw Error(Errc::unsupported,
                "attention_prefill on cuda: quantized rows (KvSpan::quant) are attended by the "
                "split-K path only; call attention(), which cuts the block for it");
  dispatch_head_dim(a.D, "attention_prefill", [&](auto d) {
    constexpr int D = decltype(d)::value;
    constexpr size_t smem = prefill_smem<D>();
    static const bool configured = [] {  // > 48 KiB of dynamic shared memory needs an opt-in
      KVZIP_CUDA_CHECK(cudaFuncSetAttribute(
          prefill_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
      return true;
    }();
    (void)configured;
    const dim3 grid(ceil_div(a.T, tile::kRows), a.Hq);
    prefill_kernel<D><<<grid, tile::kThreads, smem, as_stream(stream)>>>(p);
    KVZIP_CUDA_CHECK_LAUNCH();
  });
}

// Rows per split: kDecodeSplit, widened (in whole multiples) so that no more than kMaxSplits
// splits cover the longest head; keeps the partial buffers at O(Hkv · kMaxSplits · rows · D).
// The same rule, separately, for the quantized rows.
SplitGeom split_geometry(const AttentionArgs& a) {
  uint32_t max_len = 0, max_quant = 0;
  for (uint32_t h = 0; h < a.Hkv; ++h) {
    max_len = std::max(max_len, a.kv[h].len);
    if (a.kv[h].quant) max_quant = std::max(max_quant, a.kv[h].quant->rows());
  }
  auto split_rows = [](uint32_t n) {
    return kDecodeSplit * ceil_div(ceil_div(n, kDecodeSplit), kMaxSplits);
  };
  const uint32_t split_len = split_rows(max_len);
  const uint32_t quant_len = max_quant ? split_rows(max_quant) : kDecodeSplit;
  const uint32_t R = a.T * (a.Hq / a.Hkv);
  return SplitGeom{ceil_div(max_len, split_len), split_len, ceil_div(R, kDecodeRows) * kDecodeRows,
                   max_quant ? ceil_div(max_quant, quant_len) : 0u, quant_len};
}

void attention_decode(const AttentionArgs& a, void* stream) {
  const AttnParams p = make_params(a);
  const uint32_t G = a.Hq / a.Hkv, R = a.T * G;
  KVZIP_ASSERT(R <= kSplitMaxRows);
  const SplitGeom sg = split_geometry(a);
  const bool quantized = sg.n_quant > 0;
  const QuantTable qt = quantized ? make_quant_table(a) : QuantTable{};
  dispatch_head_dim(a.D, "attention_decode", [&](auto d) {
    constexpr int D = decltype(d)::value;
    cudaStream_t s = as_stream(stream);
    const size_t slots = size_t(a.Hkv) * (sg.n_split + sg.n_quant) * sg.r_pad;
    float* part_o = nullptr;
    float2* part_ml = nullptr;
    // Stream-ordered allocations come from the device's pool: no device-wide sync per decode.
    KVZIP_CUDA_CHECK(
        cudaMallocAsync(reinterpret_cast<void**>(&part_o), slots * D * sizeof(float), s));
    cudaError_t err =
        cudaMallocAsync(reinterpret_cast<void**>(&part_ml), slots * sizeof(float2), s);
    if (err == cudaSuccess) {
      const dim3 grid(sg.n_split, a.Hkv, sg.r_pad / kDecodeRows);
      decode_kernel<D><<<grid, tile::kThreads, 0, s>>>(p, part_o, part_ml, sg);
      err = cudaGetLastError();
      if (err == cudaSuccess && quantized) {
        const dim3 qgrid(sg.n_quant, a.Hkv, sg.r_pad / kDecodeRows);
        decode_quant_kernel<D><<<qgrid, tile::kThreads, 0, s>>>(p, qt, part_o, part_ml, sg);
        err = cudaGetLastError();
      }
      if (err == cudaSuccess) {
        decode_reduce<D><<<dim3(R, a.Hkv), D, 0, s>>>(p, part_o, part_ml, sg);
        err = cudaGetLastError();
      }
      KVZIP_CUDA_CHECK(cudaFreeAsync(part_ml, s));
    }
    KVZIP_CUDA_CHECK(cudaFreeAsync(part_o, s));
    KVZIP_CUDA_CHECK(err);
  });
}

void attention(const AttentionArgs& a, void* stream) {
  KVZIP_ASSERT(a.Hkv > 0 && a.Hq % a.Hkv == 0 && a.kv);
  const uint32_t G = a.Hq / a.Hkv;
  // Up to kSplitMaxRows query rows per KV head the split-K path is never narrower than prefill's
  // ceil(T/32)·Hq blocks, and over a long cache it is far wider (a block per split).
  if (uint64_t(a.T) * G <= kSplitMaxRows) return attention_decode(a, stream);
  if (!any_quantized(a)) return attention_prefill(a, stream);
  // Quantized rows have the split-K kernel only: blocks of whole tokens [t0, t1), each a call of
  // its own over spans shortened by the T − t1 rows its tokens do not see yet.
  KVZIP_ASSERT(G <= kSplitMaxRows && a.q && a.out);
  const uint32_t step = kSplitMaxRows / G;
  std::vector<KvSpan> spans(a.kv, a.kv + a.Hkv);
  for (uint32_t t0 = 0; t0 < a.T; t0 += step) {
    const uint32_t t1 = std::min(a.T, t0 + step);
    for (uint32_t h = 0; h < a.Hkv; ++h) {
      KVZIP_ASSERT(a.kv[h].len >= a.T);
      spans[h].len = a.kv[h].len - (a.T - t1);
    }
    AttentionArgs b = a;
    b.kv = spans.data();
    b.q = a.q + size_t(t0) * a.Hq * a.D;
    b.out = a.out + size_t(t0) * a.Hq * a.D;
    b.T = t1 - t0;
    attention_decode(b, stream);
  }
}

}  // namespace kvzip::kernels::cuda
