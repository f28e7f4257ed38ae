// The orthonormal Walsh–Hadamard rotation of K/V rows (spec/kvzip_format.md §12.1): the
// one definition that the quantizer (kernels/kv_quant.h), the attention over codes and the
// format's reconstruction (format::dequantize_rows) all call, so that every reader gets the same
// bits. H is the Sylvester matrix of size n (a power of two), H[i][j] = (-1)^popcount(i & j) / √n;
// it is symmetric and its own inverse, so rotating twice gives the row back (up to rounding).
// Rotating spreads an outlier channel over all channels, so that a per-row group's error no
// longer sits in a few channels (docs/quantized-kv.md has the measurement).
#pragma once
#include <cstdint>

namespace kvzip {

// n is a power of two, 2 <= n <= 2^31 (the sizes the rotation is defined for).
bool hadamard_size(uint64_t n);
// The binary32 factor of the last step: 1/√n computed in binary64 (correctly rounded sqrt and
// division), then rounded to binary32. Exact (a power of two) when n is a power of four.
float hadamard_scale(uint32_t n);
// x (n) <- H·x in place, in exactly this order (each step is one IEEE binary32 operation, so any
// compiler or vector width gives the same bits):
//   for h = 1, 2, 4, ..., n/2:  for i = 0, 2h, 4h, ... < n:  for j = i .. i+h-1:
//       (x[j], x[j+h]) <- (x[j] + x[j+h], x[j] - x[j+h])
//   then x[j] <- x[j] * hadamard_scale(n) for every j.
// n must satisfy hadamard_size (asserted). On x86 CPUs with AVX2 and n >= 8, eight lanes at a time
// (the first three steps inside each vector by lane swaps): every output is still the one addition,
// subtraction or product above, so the bits are the plain loop's (tests/common/test_hadamard.cc).
void hadamard_rotate(float* x, uint32_t n);
// The plain loop above, whatever the CPU: the reference the vector path is tested against.
void hadamard_rotate_reference(float* x, uint32_t n);

}  // namespace kvzip
