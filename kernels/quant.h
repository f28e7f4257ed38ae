// ggml tensor types as stored in GGUF files: ids, block geometry, and dequantization to fp32.
// Ids and block layouts follow ggml (include/ggml.h, src/ggml-common.h); every multi-byte field
// in a block is little-endian. dequantize_row handles F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0, Q4_K, Q5_K and Q6_K; any other type throws Errc::unsupported naming the type.
#pragma once
#include <cstdint>

namespace kvzip::kernels::quant {

// ggml_type ids. Numbers are ggml's and are never reused; gaps are ids ggml removed.
enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
};

struct TypeTraits {
  const char* name;     // ggml's spelling, e.g. "Q4_1"
  int64_t block_elems;  // elements per block (1 for plain types)
  int64_t block_bytes;  // bytes per block
  bool dequantizable;   // dequantize_row supports it
};

// Traits of a ggml type id, or nullptr when the id is not a type this build knows the geometry of
// (removed ids, ids newer than this build, out of range).
const TypeTraits* type_traits(uint32_t id);
// Traits of a known type; throws Errc::unsupported for an unknown id.
const TypeTraits& traits(GgmlType t);
// "Q4_1", or "type#N" for an unknown id.
const char* type_name(GgmlType t);
inline int64_t block_elems(GgmlType t) { return traits(t).block_elems; }
inline int64_t block_bytes(GgmlType t) { return traits(t).block_bytes; }
// Bytes of n elements of type t; n must be a multiple of block_elems (else Errc::invalid_argument).
uint64_t row_bytes(GgmlType t, int64_t n);

// Decodes n elements (n % block_elems == 0) from src into dst. Throws Errc::unsupported for types
// that are not dequantizable and Errc::invalid_argument when n is not a whole number of blocks.
void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);

// Decodes `rows` consecutive rows of `n_per_row` elements each, spreading rows over up to
// `threads` std::threads (threads <= 1: on the calling thread). dst holds rows * n_per_row floats.
void dequantize_rows(GgmlType t, const void* src, float* dst, int64_t n_per_row, int64_t rows,
                     int threads);

// 16-bit float conversions: common/half.h (f16_to_f32, f32_to_f16, bf16_to_f32, f32_to_bf16).

}  // namespace kvzip::kernels::quant
