// Private to kernels/cpu/quant.cc and dequant_x86.cc: the AVX2 block decoders behind
// quant::dequantize_row, and the portable scalar decoder they are tested against.
#pragma once
#include <cstdint>

#include "kernels/quant.h"

namespace kvzip::quant::detail {

// Decodes n blocks (n elements for F16 and BF16) from src into dst.
using DequantFn = void (*)(const uint8_t* src, float* dst, int64_t n);

bool dequant_avx2_usable();      // compiled in and supported by this CPU
DequantFn dequant_avx2(GgmlType t);  // nullptr for types without an AVX2 decoder

// dequantize_row on the portable scalar decoders only (the reference of the AVX2 ones).
void dequantize_row_scalar(GgmlType t, const void* src, float* dst, int64_t n);

}  // namespace kvzip::quant::detail
