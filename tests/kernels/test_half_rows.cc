// kernels/detail/half_rows.h: the AVX2 and AVX-512 F16/BF16/F32 row kernels equal the portable
// reference bit for bit (rows not a multiple of four, widths with a partial last chunk, a row map,
// 1-5 tokens); a token's result does not depend on the tokens computed with it (serving's batched
// steps); and the reference is within fp32 rounding of a float64 product.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/half.h"
#include "kernels/detail/half_rows.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"

namespace kvzip {
namespace {

using kernels::quant::GgmlType;
namespace kd = kernels::cpu::detail;

struct Case {
  std::vector<uint8_t> data;
  std::vector<uint32_t> map;
  std::vector<float> x;
  kernels::MatmulArgs a;
};

// rows x cols weights of type t (values of either sign and several magnitudes), T tokens.
Case make_case(GgmlType t, uint32_t rows, uint32_t cols, uint32_t T, bool row_map, uint32_t seed) {
  Case c;
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const size_t esz = t == GgmlType::F32 ? 4 : 2;
  c.data.resize(size_t(rows) * cols * esz);
  for (size_t i = 0; i < size_t(rows) * cols; ++i) {
    const float v = nd(rng) * (i % 7 == 0 ? 8.0f : 0.5f);
    if (t == GgmlType::F32) {
      std::memcpy(c.data.data() + 4 * i, &v, 4);
    } else {
      const uint16_t h = t == GgmlType::F16 ? f32_to_f16(v) : f32_to_bf16(v);
      std::memcpy(c.data.data() + 2 * i, &h, 2);
    }
  }
  c.x.resize(size_t(T) * cols);
  for (float& v : c.x) v = nd(rng);
  if (row_map) {
    c.map.resize(rows);
    for (uint32_t r = 0; r < rows; ++r) c.map[r] = (r * 7 + 3) % rows;  // rows coprime with 7
  }
  c.a.x = c.x.data();
  c.a.w = kernels::MatrixView{t,    c.data.data(), cols * esz,
                              rows, cols,          row_map ? c.map.data() : nullptr};
  c.a.T = T;
  return c;
}

std::vector<float> run(kd::HalfRowsFn fn, Case& c, uint32_t r0 = 0, uint32_t r1 = UINT32_MAX) {
  std::vector<float> y(size_t(c.a.T) * c.a.w.rows, -7.0f);
  c.a.y = y.data();
  fn(c.a, r0, std::min(r1, c.a.w.rows));
  return y;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("half rows: every ISA's kernel equals the portable reference bit for bit",
          "[kernels][half_rows]") {
  int checked = 0;
  for (GgmlType t : {GgmlType::F16, GgmlType::BF16, GgmlType::F32}) {
    const kd::HalfRowsFn ref = kd::half_rows_portable(t);
    REQUIRE(ref);
    for (kd::HalfRowsFn fn : {kd::half_rows_avx2(t), kd::half_rows_avx512(t)}) {
      if (!fn) continue;  // not on this CPU (the portable kernel is then what runs)
      for (uint32_t cols : {16u, 64u, 200u, 576u, 1000u})
        for (uint32_t T : {1u, 2u, 5u})
          for (bool map : {false, true}) {
            Case c = make_case(t, 11, cols, T, map, cols + T);
            INFO("type " << kernels::quant::type_name(t) << " cols " << cols << " T " << T
                         << " map " << map);
            CHECK(same_bits(run(fn, c), run(ref, c)));
            ++checked;
          }
    }
  }
  if (checked == 0) WARN("no AVX2 or AVX-512 half-rows kernel on this CPU: only the reference ran");
}

TEST_CASE("half rows: a token's result does not depend on the tokens or rows computed with it",
          "[kernels][half_rows]") {
  for (GgmlType t : {GgmlType::F16, GgmlType::BF16}) {
    kd::HalfRowsFn fn = kd::half_rows_avx512(t);
    if (!fn) fn = kd::half_rows_avx2(t);
    if (!fn) fn = kd::half_rows_portable(t);
    Case all = make_case(t, 13, 328, 4, false, 5);
    const std::vector<float> y = run(fn, all);
    for (uint32_t tok = 0; tok < 4; ++tok) {
      Case one = make_case(t, 13, 328, 4, false, 5);
      one.a.x = one.x.data() + size_t(tok) * 328;
      one.a.T = 1;
      const std::vector<float> y1 = run(fn, one);
      CHECK(std::memcmp(y1.data(), y.data() + size_t(tok) * 13, 13 * sizeof(float)) == 0);
    }
    // Rows split into ranges as the pool's tasks split them: the same values.
    std::vector<float> parts(size_t(4) * 13, -7.0f);
    all.a.y = parts.data();
    for (uint32_t r0 = 0; r0 < 13; r0 += 5) fn(all.a, r0, std::min(r0 + 5, 13u));
    CHECK(same_bits(parts, y));
  }
}

TEST_CASE("half rows: the reference is the product within fp32 rounding", "[kernels][half_rows]") {
  for (GgmlType t : {GgmlType::F16, GgmlType::BF16, GgmlType::F32}) {
    Case c = make_case(t, 9, 1000, 3, true, 17);
    const std::vector<float> y = run(kd::half_rows_portable(t), c);
    std::vector<float> row(c.a.w.cols);
    for (uint32_t r = 0; r < c.a.w.rows; ++r) {
      kernels::quant::dequantize_row(t, c.a.w.data + size_t(c.map[r]) * c.a.w.row_bytes, row.data(),
                                     c.a.w.cols);
      for (uint32_t tok = 0; tok < c.a.T; ++tok) {
        double want = 0, mag = 0;
        for (uint32_t i = 0; i < c.a.w.cols; ++i) {
          want += double(row[i]) * c.x[size_t(tok) * c.a.w.cols + i];
          mag += std::fabs(double(row[i]) * c.x[size_t(tok) * c.a.w.cols + i]);
        }
        // 1000 terms in 16 chains of ~63 plus a 4-level fold: well inside 128 ulp of Σ|w·x|.
        CHECK(std::fabs(y[size_t(tok) * c.a.w.rows + r] - want) <= mag * 128 * 6e-8);
      }
    }
  }
}

}  // namespace kvzip
