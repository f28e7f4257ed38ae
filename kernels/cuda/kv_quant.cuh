// Device-side reading of q8/q4 K/V rows (kernels/kv_quant.h, spec/kvzip_format.md §12.1), shared
// by the kv_quant kernels (kv_quant.cu) and the attention over quantized spans (attention.cu):
// the layout as kernels read it, a code, a group's scale and minimum (the byte form through
// common/kv_params.h's __host__ __device__ decoder, the f16 form through the device's
// conversion), one value c·fma(s, q, m), and the Walsh–Hadamard transform of rows held in shared
// memory (common/hadamard.h's butterflies stage by stage, then its binary32 factor: within a stage
// every output is one addition of the previous stage's values, so the order the threads take does
// not change a bit, and a rotated row equals the CPU's bit for bit). Included only by CUDA
// translation units.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#include "common/error.h"
#include "common/hadamard.h"
#include "common/kv_params.h"
#include "kernels/kv_quant.h"

namespace kvzip::kernels::cuda::quant {

// D and group size as the kernels read them (KvQuantLayout's helpers are host functions).
struct DevLayout {
  uint32_t bits, D, group, groups, words;  // words: parameter words per row
  uint32_t code_bytes;                     // per row
  bool byte_params, rotated;
  float rot_scale;  // hadamard_scale(D) when rotated
};

inline DevLayout dev_layout(const KvQuantLayout& l) {
  KVZIP_ASSERT((l.bits == 8 || l.bits == 4) && l.group > 0 && l.D % l.group == 0 && l.D % 2 == 0);
  KVZIP_ASSERT(!l.rotated || hadamard_size(l.D));
  KVZIP_ASSERT(l.D <= 4096);  // the .kvz limit; a row of floats then fits the shared memory
  return {l.bits,
          l.D,
          l.group,
          l.groups(),
          static_cast<uint32_t>(l.param_words()),
          static_cast<uint32_t>(l.code_bytes()),
          l.byte_params,
          l.rotated,
          l.rotated ? hadamard_scale(l.D) : 1.0f};
}

// Channel j's code in a row of codes (q4: channel 2i in the low nibble of byte i).
__device__ __forceinline__ uint32_t code_at(const uint8_t* row, uint32_t bits, uint32_t j) {
  if (bits == 8) return row[j];
  const uint8_t b = row[j >> 1];
  return (j & 1) ? (b >> 4) : (b & 0x0f);
}

__device__ __forceinline__ float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }

// Group g's scale and minimum from a row's parameter words (kv_group_params' device twin).
__device__ __forceinline__ KvGroupParams group_params(const uint16_t* p, uint32_t g,
                                                      const DevLayout& l) {
  if (l.byte_params) return kv_byte_group_params(p[g], l.bits);
  return {h2f(p[2 * g]), h2f(p[2 * g + 1])};
}

// Channel j of a stored row: c[j] · fma(s, q, m) in binary32, as the CPU computes it (for rotated
// rows this is channel j of H·x; the caller rotates or works in the rotated basis).
__device__ __forceinline__ float stored_value(const float* channel_scale,
                                              const uint16_t* row_params, const uint8_t* row_codes,
                                              uint32_t j, const DevLayout& l) {
  const KvGroupParams p = group_params(row_params, j / l.group, l);
  const float q = static_cast<float>(code_at(row_codes, l.bits, j));
  return __fmul_rn(channel_scale[j], __fmaf_rn(p.s, q, p.m));
}

// x: `rows` rows of n floats (n a power of two) at a stride of `stride` floats in shared memory
// <- H·x row by row. Called by every thread of the block; the caller has written x and not yet
// synchronized; returns synchronized.
__device__ inline void hadamard_rows(float* x, uint32_t rows, uint32_t stride, uint32_t n,
                                     float scale) {
  const uint32_t half = n / 2;
  for (uint32_t h = 1; h < n; h *= 2) {
    __syncthreads();
    for (uint32_t idx = threadIdx.x; idx < rows * half; idx += blockDim.x) {
      const uint32_t r = idx / half, i = idx % half;
      const uint32_t j = (i / h) * 2 * h + i % h;
      float* xr = x + size_t(r) * stride;
      const float a = xr[j], b = xr[j + h];
      xr[j] = __fadd_rn(a, b);
      xr[j + h] = __fsub_rn(a, b);
    }
  }
  __syncthreads();
  for (uint32_t idx = threadIdx.x; idx < rows * n; idx += blockDim.x) {
    float* e = x + size_t(idx / n) * stride + idx % n;
    *e = __fmul_rn(*e, scale);
  }
  __syncthreads();
}

}  // namespace kvzip::kernels::cuda::quant
