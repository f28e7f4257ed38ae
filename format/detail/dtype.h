// Conversion between the f32 rows kvzip computes with and the storage dtypes of the .kvz file
// (f32, f16 = IEEE binary16, bf16 = the top half of binary32). Rounding is to nearest, ties to
// even (common/half.h); every non-NaN value read from a file re-encodes to the same bits (exact
// HDF5 round trip). NaN never reaches a valid file: K/V holding NaN are refused as corrupt.
#pragma once
#include <cstddef>
#include <cstdint>

#include "common/half.h"  // the scalar definition of f16/bf16 conversion
#include "format/format.h"

namespace kvzip::format::detail {

bool dtype_known(uint32_t id);
// n values: src (n) f32 -> dst (n * dtype_size) bytes, and back.
void encode_values(DType t, const float* src, size_t n, uint8_t* dst);
void decode_values(DType t, const uint8_t* src, size_t n, float* dst);

}  // namespace kvzip::format::detail
