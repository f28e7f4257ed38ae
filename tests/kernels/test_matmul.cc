// kernels/matmul: products over every stored weight type, both paths, every T regime (qgemv for
// T <= 2, small-T tiles, slabs + sgemm), with and without a row map, against a float64 product
// over the dequantized rows. Block contents are random: K-quant blocks are random bytes with sane
// fp16 scales, the 32-element formats come from the test quantizer.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "common/error.h"
#include "common/half.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"
#include "kernels/thread_pool.h"
#include "tests/support/random_weights.h"
#include "tests/support/tiny_gguf.h"

namespace kvzip {
namespace {

using quant::GgmlType;

void put_half(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  p[0] = uint8_t(h & 0xFF);
  p[1] = uint8_t(h >> 8);
}

// rows · row_bytes bytes of random blocks of type t.
std::vector<uint8_t> random_matrix(GgmlType t, uint32_t rows, uint32_t cols, uint64_t seed) {
  const size_t rb = quant::row_bytes(t, cols);
  std::vector<uint8_t> out(rows * rb);
  if (t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K) {
    const std::vector<float> u = test::random_vector(out.size(), seed, 0.0f, 256.0f);
    for (size_t i = 0; i < out.size(); ++i) out[i] = uint8_t(std::min(255.0f, u[i]));
    const size_t bb = size_t(quant::block_bytes(t));
    for (size_t b = 0; b < out.size() / bb; ++b) {
      uint8_t* blk = out.data() + b * bb;
      if (t == GgmlType::Q6_K) {
        put_half(blk + 208, 0.001f);
      } else {
        put_half(blk, 0.002f);
        put_half(blk + 2, 0.001f);
      }
    }
    return out;
  }
  for (uint32_t r = 0; r < rows; ++r) {
    const std::vector<float> v = test::random_vector(cols, seed + r, -1.0f, 1.0f);
    const std::vector<uint8_t> q = test::quantize_row(t, v.data(), cols);
    std::memcpy(out.data() + r * rb, q.data(), rb);
  }
  return out;
}

// y(T, out) in float64 from canonical fp32 rows.
std::vector<double> reference(const MatrixView& w, const std::vector<float>& x, uint32_t T,
                              const std::vector<float>& bias) {
  std::vector<float> row(w.cols);
  std::vector<double> y(size_t(T) * w.rows);
  for (uint32_t r = 0; r < w.rows; ++r) {
    const uint32_t s = w.row_map ? w.row_map[r] : r;
    quant::dequantize_row(w.type, w.data + size_t(s) * w.row_bytes, row.data(), w.cols);
    for (uint32_t t = 0; t < T; ++t) {
      double acc = bias.empty() ? 0.0 : bias[r];
      for (uint32_t i = 0; i < w.cols; ++i) acc += double(row[i]) * x[size_t(t) * w.cols + i];
      y[size_t(t) * w.rows + r] = acc;
    }
  }
  return y;
}

}  // namespace

TEST_CASE("matmul equals a float64 product over the dequantized rows for every type, path and T",
          "[kernels][matmul]") {
  const GgmlType type = GENERATE(GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0,
                                 GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                                 GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K);
  const uint32_t T = GENERATE(1u, 2u, 5u, 48u, 49u, 70u);
  const bool mapped = GENERATE(false, true);
  const MatmulPath path = GENERATE(MatmulPath::Fast, MatmulPath::Exact);
  const uint32_t rows = 72, cols = 512;  // 72: not a multiple of the 16-row tasks
  INFO(quant::type_name(type) << " T=" << T << (mapped ? " row map" : "") << " "
                              << matmul_path_name(path));
  const std::vector<uint8_t> w = random_matrix(type, rows, cols, 11);
  std::vector<uint32_t> map(rows);
  std::iota(map.begin(), map.end(), 0u);
  for (uint32_t r = 0; r + 1 < rows; r += 2) std::swap(map[r], map[r + 1]);  // a head-like swap
  const MatrixView view{type, w.data(), quant::row_bytes(type, cols), rows, cols,
                        mapped ? map.data() : nullptr};
  const std::vector<float> x = test::random_vector(size_t(T) * cols, 3);
  const std::vector<float> bias = test::random_vector(rows, 4);
  std::vector<float> y(size_t(T) * rows, NAN);
  ThreadPool pool(2);
  cpu::matmul(&pool, std::span<const MatmulArgs>(std::vector<MatmulArgs>{{x.data(), view, bias.data(), y.data(), T}}), path);
  const std::vector<double> want = reference(view, x, T, bias);
  double worst = 0, scale = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    worst = std::max(worst, std::fabs(y[i] - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  CHECK(worst <= 2e-5 * scale);
}

TEST_CASE("matmul batches jobs of different types and checks each job", "[kernels][matmul]") {
  const uint32_t cols = 256, T = 1;
  const std::vector<uint8_t> a = random_matrix(GgmlType::Q4_0, 40, cols, 1);
  const std::vector<uint8_t> b = random_matrix(GgmlType::Q6_K, 24, cols, 2);
  const MatrixView va{GgmlType::Q4_0, a.data(), quant::row_bytes(GgmlType::Q4_0, cols), 40, cols, nullptr};
  const MatrixView vb{GgmlType::Q6_K, b.data(), quant::row_bytes(GgmlType::Q6_K, cols), 24, cols, nullptr};
  const std::vector<float> x = test::random_vector(cols, 9);
  std::vector<float> ya(40), yb(24);
  const MatmulArgs jobs[] = {{x.data(), va, nullptr, ya.data(), T}, {x.data(), vb, nullptr, yb.data(), T}};
  ThreadPool pool(2);
  cpu::matmul(&pool, jobs, MatmulPath::Fast);
  const auto wa = reference(va, x, T, {}), wb = reference(vb, x, T, {});
  for (size_t i = 0; i < ya.size(); ++i) CHECK(ya[i] == Approx(wa[i]).margin(1e-4));
  for (size_t i = 0; i < yb.size(); ++i) CHECK(yb[i] == Approx(wb[i]).margin(1e-4));

  MatmulArgs bad = jobs[1];
  bad.w.cols = 100;  // not a whole number of 256-element blocks
  CHECK_THROWS_WITH(cpu::matmul(&pool, std::span<const MatmulArgs>(&bad, 1), MatmulPath::Fast),
                    Catch::Contains("Q6_K") && Catch::Contains("100"));
  bad = jobs[0];
  bad.w.type = GgmlType::IQ2_XXS;
  try {
    cpu::matmul(&pool, std::span<const MatmulArgs>(&bad, 1), MatmulPath::Fast);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::unsupported);
    CHECK_THAT(e.what(), Catch::Contains("IQ2_XXS"));
  }
}

}  // namespace kvzip
