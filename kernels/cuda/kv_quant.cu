// CUDA twins of kernels/cpu/kv_quant.cc for the read side: dequantization of group-wise q8/q4 rows
// (bit-identical to the CPU: the same c * fma(s, q, m) in binary32) and attention logits computed
// straight from the codes (one warp per (query, row): lanes take channels, per-group sums of
// c·q·code and c·q are reduced, then the group's scale and minimum applied). Parity with the CPU
// kernels is tested in tests/cuda/test_cuda_kv_quant.cc.
#include <cuda_fp16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/kv_quant.h"

namespace kvzip::kernels::cuda {
namespace {

__device__ __forceinline__ uint32_t code_at(const uint8_t* row, uint32_t bits, uint32_t j) {
  if (bits == 8) return row[j];
  const uint8_t b = row[j >> 1];
  return (j & 1) ? (b >> 4) : (b & 0x0f);
}

__device__ __forceinline__ float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }

// KvQuantLayout's helpers are host functions; the same sums for device code.
__device__ __forceinline__ uint32_t groups_of(const KvQuantLayout& l) { return l.D / l.group; }
__device__ __forceinline__ size_t code_bytes_of(const KvQuantLayout& l) { return size_t(l.D) * l.bits / 8; }

__global__ void dequant_kernel(KvQuantRows in, float* x) {
  const size_t idx = size_t(blockIdx.x) * blockDim.x + threadIdx.x;  // over (rows, D)
  const uint32_t D = in.layout.D;
  if (idx >= in.rows * D) return;
  const size_t r = idx / D;
  const uint32_t j = static_cast<uint32_t>(idx % D), g = j / in.layout.group;
  const uint16_t* p = in.params + r * 2 * groups_of(in.layout);
  const float q = static_cast<float>(code_at(in.codes + r * code_bytes_of(in.layout), in.layout.bits, j));
  x[idx] = __fmul_rn(in.channel_scale[j], __fmaf_rn(h2f(p[2 * g]), q, h2f(p[2 * g + 1])));
}

// One warp per (query t, row r). D <= 4096 channels, groups of any size dividing D: lanes walk the
// channels of one group at a time.
__global__ void scores_kernel(const float* q, uint32_t n_q, KvQuantRows k, float scale, float* scores) {
  const size_t warp = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const uint32_t lane = threadIdx.x % 32;
  if (warp >= size_t(n_q) * k.rows) return;
  const uint32_t t = static_cast<uint32_t>(warp / k.rows);
  const size_t r = warp % k.rows;
  const uint32_t Gs = k.layout.group, G = groups_of(k.layout);
  const float* qt = q + size_t(t) * k.layout.D;
  const uint8_t* cr = k.codes + r * code_bytes_of(k.layout);
  const uint16_t* pr = k.params + r * 2 * G;
  float acc = 0.0f;
  for (uint32_t g = 0; g < G; ++g) {
    float dot = 0.0f, qs = 0.0f;
    for (uint32_t i = lane; i < Gs; i += 32) {
      const uint32_t j = g * Gs + i;
      const float qc = qt[j] * k.channel_scale[j];
      dot += qc * static_cast<float>(code_at(cr, k.layout.bits, j));
      qs += qc;
    }
    dot = warp_sum(dot);
    qs = warp_sum(qs);
    acc += h2f(pr[2 * g]) * dot + h2f(pr[2 * g + 1]) * qs;
  }
  if (lane == 0) scores[size_t(t) * k.rows + r] = scale * acc;
}

}  // namespace

void kv_dequantize_rows(const KvQuantRows& in, float* x, void* stream) {
  const size_t n = in.rows * in.layout.D;
  if (n == 0) return;
  KVZIP_ASSERT((in.layout.bits == 8 || in.layout.bits == 4) && in.layout.group > 0 &&
               in.layout.D % in.layout.group == 0);
  constexpr unsigned kThreads = 256;
  dequant_kernel<<<ceil_div(n, kThreads), kThreads, 0, as_stream(stream)>>>(in, x);
  KVZIP_CUDA_CHECK_LAUNCH();
}

void kv_quant_scores(const float* q, uint32_t n_q, const KvQuantRows& k, float scale, float* scores,
                     void* stream) {
  const size_t warps = size_t(n_q) * k.rows;
  if (warps == 0) return;
  KVZIP_ASSERT((k.layout.bits == 8 || k.layout.bits == 4) && k.layout.group > 0 &&
               k.layout.D % k.layout.group == 0);
  constexpr unsigned kThreads = 256;
  scores_kernel<<<ceil_div(warps * 32, kThreads), kThreads, 0, as_stream(stream)>>>(q, n_q, k, scale, scores);
  KVZIP_CUDA_CHECK_LAUNCH();
}

}  // namespace kvzip::kernels::cuda
