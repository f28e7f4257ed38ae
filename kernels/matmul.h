// Matrix products with weights kept in the ggml types model files store (F32, F16, BF16, Q4_0,
// Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K): Y(T, out) = X(T, in) · W(out, in)^T (+ bias), X and
// Y fp32, row-major. No whole-matrix fp32 copy is ever made:
//  - T == 1 (decode): a threaded GEMV streams W's blocks once; Q4_0/Q4_1/Q8_0 rows are decoded
//    in registers (kernels/qgemv.h), other types a few rows at a time into a small buffer.
//  - T > 1 (prefill): W is dequantized one slab of rows at a time (at most kMatmulSlabFloats
//    floats) and multiplied with OpenBLAS sgemm; F32 weights are used in place.
// Both are exact: the same fp32 products as on the dequantized matrix, up to summation order.
// A view may carry a row map (Q/K rows stored in another order): output row r reads stored row
// row_map[r], so callers see canonical rows and nothing is permuted in memory.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

#include "kernels/device.h"
#include "kernels/quant.h"

namespace kvzip {

// A (rows, cols) = (out, in) weight matrix as stored.
struct MatrixView {
  quant::GgmlType type = quant::GgmlType::F32;
  const uint8_t* data = nullptr;      // rows · row_bytes bytes, stored row order
  size_t row_bytes = 0;               // quant::row_bytes(type, cols)
  uint32_t rows = 0;                  // out
  uint32_t cols = 0;                  // in; a multiple of the type's block size
  const uint32_t* row_map = nullptr;  // (rows) canonical row r is stored row row_map[r]; or null
};

struct MatmulArgs {
  const float* x = nullptr;     // (T, in)
  MatrixView w;                 // (out, in)
  const float* bias = nullptr;  // (out) or nullptr, canonical row order
  float* y = nullptr;           // (T, out); must not overlap x
  uint32_t T = 0;
};

// Exact: fp32 arithmetic on dequantized rows (a slab or a few rows at a time) — the oracle the
// golden tests run. Fast: the fastest kernel this CPU has for the type; today that decodes
// Q4_0/Q4_1/Q8_0 blocks in registers for T <= 2 (the same values, another summation order), and
// otherwise equals Exact.
enum class MatmulPath : uint8_t { Exact = 0, Fast = 1 };
const char* matmul_path_name(MatmulPath p);

// Largest dequantized slab the T > 1 path holds per call (floats; 16 MiB).
inline constexpr size_t kMatmulSlabFloats = size_t(4) << 20;

namespace cpu {
// Runs every job (checked first: known dequantizable type, cols a whole number of blocks,
// row_bytes consistent, non-null pointers, else Errc::invalid_argument / unsupported naming the
// job). Jobs with T == 1 that share nothing run as one pool run.
void matmul(ThreadPool* pool, std::span<const MatmulArgs> jobs, MatmulPath path);
}  // namespace cpu

inline void matmul(const Exec& ex, std::span<const MatmulArgs> jobs,
                   MatmulPath path = MatmulPath::Fast) {
  require_cpu(ex, "matmul");
  cpu::matmul(ex.pool, jobs, path);
}
inline void matmul(const Exec& ex, const MatmulArgs& a, MatmulPath path = MatmulPath::Fast) {
  matmul(ex, std::span<const MatmulArgs>(&a, 1), path);
}

// Canonical rows [row0, row0 + n) of w as fp32 into out (n · cols floats), spread over the pool.
void dequantize_view_rows(ThreadPool* pool, const MatrixView& w, uint32_t row0, uint32_t n,
                          float* out);

}  // namespace kvzip
