// Conversion between the f32 rows kvzip computes with and the storage dtypes of the .kvz file
// (f32, f16 = IEEE binary16, bf16 = the top half of binary32). Rounding is to nearest, ties to
// even; NaN payloads survive f16/bf16 -> f32 -> f16/bf16 unchanged, so values read from a file
// re-encode to the same bits (exact HDF5 round trip).
#pragma once
#include <cstddef>
#include <cstdint>

#include "format/format.h"

namespace kvzip::format::detail {

uint16_t f32_to_f16(float f);
float f16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);
float bf16_to_f32(uint16_t b);

bool dtype_known(uint32_t id);
// n values: src (n) f32 -> dst (n * dtype_size) bytes, and back.
void encode_values(DType t, const float* src, size_t n, uint8_t* dst);
void decode_values(DType t, const uint8_t* src, size_t n, float* dst);

}  // namespace kvzip::format::detail
