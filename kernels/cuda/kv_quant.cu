// CUDA twins of kernels/cpu/kv_quant.cc for the read side, for every layout the CPU reads (f16 or
// byte group parameters, decoded by common/kv_params.h's __host__ __device__ functions; rotated
// or not). Dequantization is bit-identical to the CPU: the same c * fma(s, q, m) in binary32 and,
// for rotated rows, the butterflies of common/hadamard.h stage by stage (within a stage every
// output is one addition of the previous stage's values, so the order the threads take does not
// change a bit) and the same binary32 factor. Attention logits are computed straight from the
// codes: one block per (query, chunk of rows) puts the query, rotated when the rows are and times
// the channel scales, in shared memory once; a warp per row reduces per-group sums of that times
// the codes and of that alone, then applies the group's scale and minimum. Parity with the CPU
// kernels is tested in tests/cuda/test_cuda_kv_quant.cc.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kv_quant.cuh"
#include "kernels/kv_quant.h"

namespace kvzip::kernels::cuda {
namespace {

using quant::code_at;
using quant::dev_layout;
using quant::DevLayout;
using quant::group_params;
using quant::stored_value;

// Unrotated rows: one thread per value.
__global__ void dequant_kernel(KvQuantRows in, DevLayout l, float* x) {
  const size_t idx = size_t(blockIdx.x) * blockDim.x + threadIdx.x;  // over (rows, D)
  if (idx >= in.rows * l.D) return;
  const size_t r = idx / l.D;
  const uint32_t j = static_cast<uint32_t>(idx % l.D);
  x[idx] =
      stored_value(in.channel_scale, in.params + r * l.words, in.codes + r * l.code_bytes, j, l);
}

// Rotated rows: one block per row, the row's values rotated in shared memory (D floats).
__global__ void dequant_rotated_kernel(KvQuantRows in, DevLayout l, float* x) {
  extern __shared__ float row[];
  const size_t r = blockIdx.x;
  const uint16_t* p = in.params + r * l.words;
  const uint8_t* codes = in.codes + r * l.code_bytes;
  for (uint32_t j = threadIdx.x; j < l.D; j += blockDim.x)
    row[j] = stored_value(in.channel_scale, p, codes, j, l);
  quant::hadamard_rows(row, 1, l.D, l.D, l.rot_scale);
  for (uint32_t j = threadIdx.x; j < l.D; j += blockDim.x) x[r * l.D + j] = row[j];
}

constexpr unsigned kScoreThreads = 256;      // 8 warps a block
constexpr uint32_t kScoreRowsPerBlock = 64;  // each warp takes every 8th row of the block's chunk

// Block (chunk, t): query t's channel-scaled (and, for rotated rows, rotated) values in shared
// memory (D floats), then one warp per row of rows [chunk·64, chunk·64 + 64).
__global__ void scores_kernel(const float* q, KvQuantRows k, DevLayout l, float scale,
                              float* scores) {
  extern __shared__ float qc[];
  const uint32_t t = blockIdx.y;
  const float* qt = q + size_t(t) * l.D;
  if (l.rotated) {
    for (uint32_t j = threadIdx.x; j < l.D; j += blockDim.x) qc[j] = qt[j];
    quant::hadamard_rows(qc, 1, l.D, l.D,
                         l.rot_scale);  // q·x = (H·q)·(H·x): the codes are those of H·x
    for (uint32_t j = threadIdx.x; j < l.D; j += blockDim.x) qc[j] *= k.channel_scale[j];
  } else {
    for (uint32_t j = threadIdx.x; j < l.D; j += blockDim.x) qc[j] = qt[j] * k.channel_scale[j];
  }
  __syncthreads();
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  const size_t chunk_end = size_t(blockIdx.x + 1) * kScoreRowsPerBlock;
  const size_t r_end = chunk_end < k.rows ? chunk_end : k.rows;
  for (size_t r = size_t(blockIdx.x) * kScoreRowsPerBlock + warp; r < r_end; r += warps) {
    const uint8_t* cr = k.codes + r * l.code_bytes;
    const uint16_t* pr = k.params + r * l.words;
    float acc = 0.0f;
    for (uint32_t g = 0; g < l.groups; ++g) {
      float dot = 0.0f, qs = 0.0f;
      for (uint32_t i = lane; i < l.group; i += 32) {
        const uint32_t j = g * l.group + i;
        dot += qc[j] * static_cast<float>(code_at(cr, l.bits, j));
        qs += qc[j];
      }
      dot = warp_sum(dot);
      qs = warp_sum(qs);
      const KvGroupParams gp = group_params(pr, g, l);
      acc += gp.s * dot + gp.m * qs;
    }
    if (lane == 0) scores[size_t(t) * k.rows + r] = scale * acc;
  }
}

}  // namespace

void kv_dequantize_rows(const KvQuantRows& in, float* x, void* stream) {
  const DevLayout l = dev_layout(in.layout);
  if (in.rows == 0) return;
  if (l.rotated) {
    KVZIP_ASSERT(in.rows <= 0x7fffffffu);  // grid.x
    const unsigned threads = l.D < 256 ? l.D : 256;
    dequant_rotated_kernel<<<static_cast<unsigned>(in.rows), threads, l.D * sizeof(float),
                             as_stream(stream)>>>(in, l, x);
  } else {
    constexpr unsigned kThreads = 256;
    dequant_kernel<<<ceil_div(in.rows * l.D, kThreads), kThreads, 0, as_stream(stream)>>>(in, l, x);
  }
  KVZIP_CUDA_CHECK_LAUNCH();
}

void kv_quant_scores(const float* q, uint32_t n_q, const KvQuantRows& k, float scale, float* scores,
                     void* stream) {
  const DevLayout l = dev_layout(k.layout);
  if (n_q == 0 || k.rows == 0) return;
  KVZIP_ASSERT(n_q <= 65535u);  // grid.y
  const dim3 grid(ceil_div(k.rows, kScoreRowsPerBlock), n_q);
  scores_kernel<<<grid, kScoreThreads, l.D * sizeof(float), as_stream(stream)>>>(q, k, l, scale,
                                                                                 scores);
  KVZIP_CUDA_CHECK_LAUNCH();
}

}  // namespace kvzip::kernels::cuda
