// Private to kernels/cpu/matmul.cc and kernels/cpu/half_rows.cc: products of F16, BF16 and F32
// weight rows with a few fp32 tokens (decode, short appends), each weight converted in registers
// as it is read — no dequantized copy of the rows (writing 16 rows to a buffer and reading them
// back holds decode to 31% of the read bandwidth, converting in registers streams at 86-90%).
//
// One summation order, on every ISA and for any number of tokens, so serving's batched steps
// equal single answers bit for bit: for row r and token t, sixteen partial sums s[0..15], where
// s[l] = fma(w[16c + l], x[16c + l], s[l]) over the row's 16-element chunks c in order (a last,
// partial chunk reads zeros for the missing elements), then folded s[l] += s[l + 8],
// s[l] += s[l + 4], s[l] += s[l + 2], s[0] + s[1]. The AVX-512 kernel keeps s in one vector, the
// AVX2 kernel in two.
#pragma once
#include <cstdint>

#include "kernels/matmul.h"

namespace kvzip::kernels::cpu::detail {

// y[t·rows + r] = W row r · x[t] for rows [r0, r1) and tokens [0, T) of one job (no bias).
using HalfRowsFn = void (*)(const MatmulArgs& a, uint32_t r0, uint32_t r1);

// F16, BF16 or F32 (else nullptr).
HalfRowsFn half_rows_portable(quant::GgmlType t);
// nullptr when the build or the CPU has no such variant.
HalfRowsFn half_rows_avx2(quant::GgmlType t);
HalfRowsFn half_rows_avx512(quant::GgmlType t);

}  // namespace kvzip::kernels::cpu::detail
