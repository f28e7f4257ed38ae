// The AVX2 block decoders behind quant::dequantize_row against the portable scalar decoders, on
// random blocks of every type (K-quant and 5-bit blocks hit every bit pattern of their qh/scale
// bytes this way), row lengths with and without a vector tail.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "common/half.h"
#include "kernels/detail/dequant_x86.h"
#include "kernels/quant.h"
#include "tests/support/random_weights.h"

namespace kvzip {
namespace {

using kernels::quant::GgmlType;

void put_half(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  p[0] = uint8_t(h & 0xFF);
  p[1] = uint8_t(h >> 8);
}

}  // namespace

TEST_CASE("AVX2 dequantization equals the scalar decoders on random blocks", "[kernels][quant]") {
  if (!kernels::quant::detail::dequant_avx2_usable()) {
    WARN("SKIPPED: this CPU has no AVX2/FMA/F16C; only the scalar decoders run here");
    return;
  }
  const GgmlType t =
      GENERATE(GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
               GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K);
  INFO(kernels::quant::type_name(t));
  REQUIRE(kernels::quant::detail::dequant_avx2(t) != nullptr);
  const int64_t be = kernels::quant::block_elems(t);
  const int64_t n = be == 1 ? 1029 : be * 7;  // 1029: an 8-lane tail for the plain types
  std::vector<uint8_t> b(kernels::quant::row_bytes(t, n));
  const std::vector<float> u = test::random_vector(b.size(), 17, 0.0f, 255.99f);
  for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t(u[i]);
  const int64_t bb = kernels::quant::block_bytes(t);
  if (t == GgmlType::F16 || t == GgmlType::BF16) {
    for (size_t i = 1; i < b.size(); i += 2) b[i] &= 0x3F;  // finite values, no NaN payloads
  } else {
    for (int64_t k = 0; k < n / be; ++k) {
      uint8_t* blk = b.data() + k * bb;
      if (t == GgmlType::Q6_K) {
        put_half(blk + 208, 0.25f + 0.01f * float(k));
      } else {
        put_half(blk, 0.5f + 0.01f * float(k));
        if (t == GgmlType::Q4_1 || t == GgmlType::Q5_1 || t == GgmlType::Q4_K ||
            t == GgmlType::Q5_K)
          put_half(blk + 2, -0.3f);
      }
    }
  }
  std::vector<float> fast(n), ref(n);
  kernels::quant::dequantize_row(t, b.data(), fast.data(), n);
  kernels::quant::detail::dequantize_row_scalar(t, b.data(), ref.data(), n);
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    worst = std::max(worst, std::fabs(double(fast[i]) - ref[i]));
    scale = std::max(scale, std::fabs(double(ref[i])));
  }
  REQUIRE(scale > 0);
  CHECK(worst <= 1e-6 * scale);  // the same values; at most an FMA's rounding apart
}

}  // namespace kvzip
