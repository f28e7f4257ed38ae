// Private to kernels/cpu/quant.cc and dequant_x86.cc: the AVX2 block decoders behind
// quant::dequantize_row, the portable scalar decoder they are tested against, and the K-quant
// scale unpacking both use.
#pragma once
#include <cstdint>

#include "kernels/quant.h"

namespace kvzip::kernels::quant::detail {

// Decodes n blocks (n elements for F16 and BF16) from src into dst.
using DequantFn = void (*)(const uint8_t* src, float* dst, int64_t n);

bool dequant_avx2_usable();          // compiled in and supported by this CPU
DequantFn dequant_avx2(GgmlType t);  // nullptr for types without an AVX2 decoder

// Q4_K / Q5_K: the 6-bit (scale, min) pair of sub-block j from a block's 12 packed scale bytes
// (shared by the scalar and AVX2 decoders).
inline void scale_min_k4(int j, const uint8_t* q, int& sc, int& mn) {
  if (j < 4) {
    sc = q[j] & 63;
    mn = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// dequantize_row on the portable scalar decoders only (the reference of the AVX2 ones).
void dequantize_row_scalar(GgmlType t, const void* src, float* dst, int64_t n);

}  // namespace kvzip::kernels::quant::detail
