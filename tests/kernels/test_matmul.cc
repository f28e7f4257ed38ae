// kernels/matmul: products over every stored weight type, both paths, every T regime (8-bit
// integer kernels on the Fast path, fp32 qgemv, small-T tiles, slabs + sgemm), with and without a
// row map, against a float64 product over the dequantized rows (test::random_matrix blocks).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "common/error.h"
#include "common/half.h"
#include "kernels/detail/bf16_gemm.h"
#include "kernels/matmul.h"
#include "kernels/qdot.h"
#include "kernels/quant.h"
#include "kernels/thread_pool.h"
#include "tests/support/random_weights.h"
#include "tests/support/thrown.h"
#include "tests/support/tiny_gguf.h"

namespace kvzip {
namespace {

using kernels::quant::GgmlType;

// y(T, out) in float64 from canonical fp32 rows, and for each output the most that rounding the
// activations to int8 per 32-element block can move it: every x moves by at most half a step,
// max|x of its block| / 254, so |Δy| <= Σ |w|·max|x_block| / 254 (kernels/qdot.h).
// abs: Σ|w·x|, which bounds what bf16 rounding of the operands can move y (kernels/matmul.h).
struct Reference {
  std::vector<double> y, int8_bound, abs;
};
Reference reference(const kernels::MatrixView& w, const std::vector<float>& x, uint32_t T,
                    const std::vector<float>& bias) {
  std::vector<float> row(w.cols);
  Reference ref{std::vector<double>(size_t(T) * w.rows), std::vector<double>(size_t(T) * w.rows),
                std::vector<double>(size_t(T) * w.rows)};
  for (uint32_t r = 0; r < w.rows; ++r) {
    const uint32_t s = w.row_map ? w.row_map[r] : r;
    kernels::quant::dequantize_row(w.type, w.data + size_t(s) * w.row_bytes, row.data(), w.cols);
    for (uint32_t t = 0; t < T; ++t) {
      const float* xt = x.data() + size_t(t) * w.cols;
      double acc = bias.empty() ? 0.0 : bias[r], bound = 0.0, abs = 0.0;
      for (uint32_t i = 0; i < w.cols; ++i)
        acc += double(row[i]) * xt[i], abs += std::fabs(double(row[i]) * xt[i]);
      for (uint32_t b = 0; b + 32 <= w.cols; b += 32) {
        double amax = 0.0, wsum = 0.0;
        for (uint32_t i = b; i < b + 32; ++i)
          amax = std::max(amax, double(std::fabs(xt[i]))), wsum += std::fabs(row[i]);
        bound += wsum * amax / 254.0;
      }
      ref.y[size_t(t) * w.rows + r] = acc;
      ref.int8_bound[size_t(t) * w.rows + r] = bound;
      ref.abs[size_t(t) * w.rows + r] = abs;
    }
  }
  return ref;
}

}  // namespace

TEST_CASE("matmul equals a float64 product over the dequantized rows for every type, path and T",
          "[kernels][matmul]") {
  const GgmlType type = GENERATE(GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0,
                                 GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                                 GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K);
  const uint32_t T = GENERATE(1u, 2u, 5u, 48u, 49u, 70u);
  const bool mapped = GENERATE(false, true);
  const kernels::MatmulPath path = GENERATE(kernels::MatmulPath::Fast, kernels::MatmulPath::Exact);
  const uint32_t rows = 72, cols = 512;  // 72: not a multiple of the 16-row tasks
  INFO(kernels::quant::type_name(type)
       << " T=" << T << (mapped ? " row map" : "") << " " << kernels::matmul_path_name(path));
  const std::vector<uint8_t> w = test::random_matrix(type, rows, cols, 11);
  std::vector<uint32_t> map(rows);
  std::iota(map.begin(), map.end(), 0u);
  for (uint32_t r = 0; r + 1 < rows; r += 2) std::swap(map[r], map[r + 1]);  // a head-like swap
  const kernels::MatrixView view{type, w.data(), kernels::quant::row_bytes(type, cols),
                                 rows, cols,     mapped ? map.data() : nullptr};
  const std::vector<float> x = test::random_vector(size_t(T) * cols, 3);
  const std::vector<float> bias = test::random_vector(rows, 4);
  std::vector<float> y(size_t(T) * rows, NAN);
  kernels::ThreadPool pool(2);
  kernels::cpu::matmul(&pool,
                       std::span<const kernels::MatmulArgs>(std::vector<kernels::MatmulArgs>{
                           {x.data(), view, bias.data(), y.data(), T}}),
                       path);
  const Reference want = reference(view, x, T, bias);
  // The Fast path of the 8-bit types may move each output by its activation-rounding bound (plus
  // fp32 slack); every other combination is fp32 arithmetic on the dequantized rows.
  // F16/BF16 at prefill T on an AVX-512 BF16 CPU: bf16 products, each within (2^-8 + 2^-16)·|w·x|.
  // Block types beyond 48 tokens on an AMX-BF16 CPU: bf16 products too.
  const bool bf16 = path == kernels::MatmulPath::Fast && kernels::matmul_bf16_products(type, T);
  const bool int8 = path == kernels::MatmulPath::Fast && kernels::qdot_supported(type) && !bf16;
  double scale = 0;
  for (double v : want.y) scale = std::max(scale, std::fabs(v));
  double worst = 0, worst_int8 = 0, worst_bf16 = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double err = std::fabs(y[i] - want.y[i]);
    if (int8) worst_int8 = std::max(worst_int8, err / (want.int8_bound[i] + 2e-5 * scale));
    else if (bf16)
      worst_bf16 =
          std::max(worst_bf16, err / ((1.0 / 256 + 1.0 / 65536) * want.abs[i] + 2e-5 * scale));
    else worst = std::max(worst, err);
  }
  CHECK(worst <= 2e-5 * scale);
  CHECK(worst_int8 <= 1.0);
  CHECK(worst_bf16 <= 1.0);
  // And the bf16 GEMM did run: its rounding shows, well past fp32's 2e-5.
  if (bf16) {
    double moved = 0;
    for (size_t i = 0; i < y.size(); ++i) moved = std::max(moved, std::fabs(y[i] - want.y[i]));
    CHECK(moved > 2e-5 * scale);
  }
}

TEST_CASE("the AMX-BF16 GEMM takes the bf16 products within their bound", "[kernels][matmul]") {
  const GgmlType type =
      GENERATE(GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1,
               GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K);
  // 16: one vector; 33: a pass of two and a pass of one (three vectors); 130: several passes.
  const uint32_t T = GENERATE(16u, 33u, 130u);
  const bool mapped = GENERATE(false, true);
  // 72 rows: two 32-row panels and one of 8 (a half with no rows); 544 columns: 17 steps of 32
  // (512, 16 steps, for the 256-element K-quant blocks).
  const uint32_t rows = 72, cols = kernels::quant::traits(type).block_elems == 256 ? 512 : 544;
  const std::vector<uint8_t> w = test::random_matrix(type, rows, cols, 21);
  std::vector<uint32_t> map(rows);
  std::iota(map.begin(), map.end(), 0u);
  for (uint32_t r = 0; r + 1 < rows; r += 2) std::swap(map[r], map[r + 1]);
  const kernels::MatrixView view{type, w.data(), kernels::quant::row_bytes(type, cols),
                                 rows, cols,     mapped ? map.data() : nullptr};
  if (!kernels::cpu::detail::bf16_gemm_amx_usable(view)) {
    WARN(
        "AMX-BF16 is not available on this CPU/build (or KVZIP_CPU_ISA picks another ISA): not "
        "tested here");
    return;
  }
  INFO(kernels::quant::type_name(type) << " T=" << T << (mapped ? " row map" : ""));
  const std::vector<float> x = test::random_vector(size_t(T) * cols, 22);
  std::vector<float> y(size_t(T) * rows, NAN);
  kernels::ThreadPool pool(2);
  kernels::cpu::detail::bf16_gemm_amx(&pool,
                                      kernels::MatmulArgs{x.data(), view, nullptr, y.data(), T});
  const Reference want = reference(view, x, T, {});
  double scale = 0, worst = 0, moved = 0;
  for (double v : want.y) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < y.size(); ++i) {
    const double err = std::fabs(y[i] - want.y[i]);
    worst = std::max(worst, err / ((1.0 / 256 + 1.0 / 65536) * want.abs[i] + 2e-5 * scale));
    moved = std::max(moved, err);
  }
  CHECK(worst <= 1.0);
  CHECK(moved > 2e-5 * scale);  // bf16 operands, not fp32 ones
}

TEST_CASE("the AMX-BF16 GEMM of a block type is the GEMM of its values rounded to bf16",
          "[kernels][matmul]") {
  // The panel decoders (Q4_0/Q4_1/Q8_0 straight to bf16, the others through dequantize_row) must
  // give exactly the bf16 rounding of each weight's fp32 value: the same products, the same bits.
  const GgmlType type = GENERATE(GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
                                 GgmlType::Q4_K, GgmlType::Q6_K);
  const uint32_t rows = 40, cols = 512, T = 70;
  const std::vector<uint8_t> w = test::random_matrix(type, rows, cols, 31);
  const kernels::MatrixView view{type, w.data(), kernels::quant::row_bytes(type, cols),
                                 rows, cols,     nullptr};
  if (!kernels::cpu::detail::bf16_gemm_amx_usable(view)) {
    WARN(
        "AMX-BF16 is not available on this CPU/build (or KVZIP_CPU_ISA picks another ISA): not "
        "tested here");
    return;
  }
  INFO(kernels::quant::type_name(type));
  std::vector<uint16_t> rounded(size_t(rows) * cols);
  std::vector<float> row(cols);
  for (uint32_t r = 0; r < rows; ++r) {
    kernels::quant::dequantize_row(type, w.data() + size_t(r) * view.row_bytes, row.data(), cols);
    for (uint32_t i = 0; i < cols; ++i) rounded[size_t(r) * cols + i] = f32_to_bf16(row[i]);
  }
  const kernels::MatrixView bview{GgmlType::BF16,
                                  reinterpret_cast<const uint8_t*>(rounded.data()),
                                  size_t(cols) * 2,
                                  rows,
                                  cols,
                                  nullptr};
  const std::vector<float> x = test::random_vector(size_t(T) * cols, 32);
  std::vector<float> y(size_t(T) * rows, NAN), yb(size_t(T) * rows, NAN);
  kernels::ThreadPool pool(2);
  kernels::cpu::detail::bf16_gemm_amx(&pool,
                                      kernels::MatmulArgs{x.data(), view, nullptr, y.data(), T});
  kernels::cpu::detail::bf16_gemm_amx(&pool,
                                      kernels::MatmulArgs{x.data(), bview, nullptr, yb.data(), T});
  CHECK(std::memcmp(y.data(), yb.data(), y.size() * sizeof(float)) == 0);
}

TEST_CASE("matmul batches jobs of different types and checks each job", "[kernels][matmul]") {
  const uint32_t cols = 256, T = 1;
  const std::vector<uint8_t> a = test::random_matrix(GgmlType::Q4_0, 40, cols, 1);
  const std::vector<uint8_t> b = test::random_matrix(GgmlType::Q6_K, 24, cols, 2);
  const kernels::MatrixView va{
      GgmlType::Q4_0, a.data(), kernels::quant::row_bytes(GgmlType::Q4_0, cols), 40, cols, nullptr};
  const kernels::MatrixView vb{
      GgmlType::Q6_K, b.data(), kernels::quant::row_bytes(GgmlType::Q6_K, cols), 24, cols, nullptr};
  const std::vector<float> x = test::random_vector(cols, 9);
  std::vector<float> ya(40), yb(24);
  const kernels::MatmulArgs jobs[] = {{x.data(), va, nullptr, ya.data(), T},
                                      {x.data(), vb, nullptr, yb.data(), T}};
  kernels::ThreadPool pool(2);
  kernels::cpu::matmul(&pool, jobs, kernels::MatmulPath::Fast);
  const Reference wa = reference(va, x, T, {}), wb = reference(vb, x, T, {});
  for (size_t i = 0; i < ya.size(); ++i)
    CHECK(std::fabs(ya[i] - wa.y[i]) <= wa.int8_bound[i] + 1e-5);
  for (size_t i = 0; i < yb.size(); ++i)
    CHECK(std::fabs(yb[i] - wb.y[i]) <= wb.int8_bound[i] + 1e-5);

  kernels::MatmulArgs bad = jobs[1];
  bad.w.cols = 100;  // not a whole number of 256-element blocks
  CHECK_THROWS_WITH(kernels::cpu::matmul(&pool, std::span<const kernels::MatmulArgs>(&bad, 1),
                                         kernels::MatmulPath::Fast),
                    Catch::Contains("Q6_K") && Catch::Contains("100"));
  bad = jobs[0];
  bad.w.type = GgmlType::IQ2_XXS;
  const Error e = test::error_from(
      [&] {
        kernels::cpu::matmul(&pool, std::span<const kernels::MatmulArgs>(&bad, 1),
                             kernels::MatmulPath::Fast);
      },
      "expected an error");
  CHECK(e.code() == Errc::unsupported);
  CHECK_THAT(e.what(), Catch::Contains("IQ2_XXS"));
}

}  // namespace kvzip
