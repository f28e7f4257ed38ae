// Matrix products with weights kept in the ggml types model files store (F32, F16, BF16, Q4_0,
// Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K): Y(T, out) = X(T, in) · W(out, in)^T (+ bias), X and
// Y fp32, row-major. No whole-matrix fp32 copy is ever made. Two paths (MatmulPath):
//  - Fast (default): the block types go through kernels/qdot.h — X quantized to int8 per
//    32-element block, integer dot products with the weight blocks as stored, W read once for all
//    T; every T on x86 CPUs (AVX2 and AVX-512 VNNI have a GEMM for prefill-sized T), up to 48
//    tokens on others (the scalar build), and every token's result is the same
//    bits whatever T and batch it is computed in (qdot's one chain per output) — except on a CPU
//    with AMX-BF16 (kernels/qgemv.h, qisa_amx_bf16), where beyond 48 tokens every block type goes
//    through bf16 products on AMX tiles instead (faster there: no per-group fp32 step; another
//    rounding, so the same bits hold up to 48 tokens only, as on a CPU without the VNNI GEMM).
//    F16/BF16 weights beyond 48 tokens on a CPU with AVX-512 BF16 go through bf16 products
//    (matmul_bf16_products).
//    Everything else as Exact.
//  - Exact: fp32 arithmetic on the weights' fp32 values: Q4_0/Q4_1/Q8_0 decode (T <= 2) decodes
//    blocks in registers (kernels/qgemv.h); up to 48 tokens a few dequantized rows at a time are
//    dotted with every token; beyond, W is dequantized one slab of rows at a time (at most
//    kMatmulSlabFloats floats) and multiplied with OpenBLAS sgemm; F32 weights are used in place.
// Exact equals the product on the dequantized matrix up to fp32 summation order; Fast differs
// from it by the activations' int8 rounding (each x moves by at most max|x of its block| / 254),
// or, for the bf16 products, by the operands' bf16 rounding (each w·x by at most 2^-8 of itself).
// A view may carry a row map (Q/K rows stored in another order): output row r reads stored row
// row_map[r], so callers see canonical rows and nothing is permuted in memory.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "kernels/device.h"
#include "kernels/quant.h"

namespace kvzip::kernels {

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

// Exact: fp32 arithmetic on the dequantized weights — the oracle the golden tests run. Fast: the
// fastest kernels this CPU has for the type (8-bit activations and integer dot products for the
// block types, bf16 products where the CPU has bf16 units; otherwise as Exact).
enum class MatmulPath : uint8_t { Exact = 0, Fast = 1 };
const char* matmul_path_name(MatmulPath p);
// What the path runs on this CPU, for --stats and benches, e.g. "fast: int8 activations x weight
// blocks (avx2) up to T=48; fp32 dequantized slabs + OpenBLAS sgemm beyond".
std::string matmul_kernels(MatmulPath p);

// Whether the Fast path takes T tokens of type t through bf16 products on this CPU (T > 48;
// F16/BF16 weights with AVX-512 BF16, or any block type with AMX-BF16): each product w·x then moves
// by at most (2^-8 + 2^-16)·|w·x| (w: the weight's fp32 value, rounded to bf16 like x).
bool matmul_bf16_products(quant::GgmlType t, uint32_t T);

// Most tokens (rows of X) the Fast path computes with 8-bit activations (kernels/qdot.h) on every
// CPU; more go through dequantized slabs and sgemm where the CPU has no int8 GEMM (no AVX2), or
// through the AMX-BF16 GEMM where it has AMX-BF16, which round differently. Callers that want one
// numeric path for every call (the server's batched steps) stay at or below it.
inline constexpr uint32_t kMatmulInt8MaxT = 48;

// Largest dequantized slab the long-T path holds per call (floats; 16 MiB).
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

}  // namespace kvzip::kernels
