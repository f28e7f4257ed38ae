// common/half.h: the one f16/bf16 conversion, edge cases worked out by hand (rounding ties,
// subnormals, overflow, NaN) and exhaustive round trips over every 16-bit pattern.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "common/half.h"

using namespace kvzip;

TEST_CASE("half to float is exact for normals, subnormals, infinities and NaN", "[common]") {
  CHECK(f16_to_f32(0x3C00) == 1.0f);
  CHECK(f16_to_f32(0xC000) == -2.0f);
  CHECK(f16_to_f32(0x7BFF) == 65504.0f);                              // largest finite half
  CHECK(f16_to_f32(0x0400) == std::ldexp(1.0f, -14));                 // smallest normal
  CHECK(f16_to_f32(0x0001) == std::ldexp(1.0f, -24));                 // smallest subnormal
  CHECK(f16_to_f32(0x03FF) == std::ldexp(1023.0f, -24));              // largest subnormal
  CHECK(std::bit_cast<uint32_t>(f16_to_f32(0x8000)) == 0x80000000u);  // -0 keeps its sign
  CHECK(f16_to_f32(0x7C00) == std::numeric_limits<float>::infinity());
  CHECK(f16_to_f32(0xFC00) == -std::numeric_limits<float>::infinity());
  CHECK(std::isnan(f16_to_f32(0x7E00)));
  CHECK(std::isnan(f16_to_f32(0x7C01)));  // signaling NaN stays NaN (quieted)
}

TEST_CASE("float to half rounds to nearest even and saturates to infinity", "[common]") {
  CHECK(f32_to_f16(1.0f) == 0x3C00);
  CHECK(f32_to_f16(-2.0f) == 0xC000);
  CHECK(f32_to_f16(65504.0f) == 0x7BFF);
  CHECK(f32_to_f16(65519.99f) == 0x7BFF);
  CHECK(f32_to_f16(65520.0f) == 0x7C00);  // the tie above 65504 goes to even = inf
  CHECK(f32_to_f16(1e10f) == 0x7C00);
  CHECK(f32_to_f16(-1e10f) == 0xFC00);
  CHECK(f32_to_f16(std::ldexp(1.0f, -24)) == 0x0001);
  CHECK(f32_to_f16(std::ldexp(1.0f, -25)) == 0x0000);         // tie between 0 and 1 -> 0
  CHECK(f32_to_f16(std::ldexp(1.5f, -25)) == 0x0001);         // above the tie
  CHECK(f32_to_f16(std::ldexp(3.0f, -25)) == 0x0002);         // tie between 1 and 2 -> 2
  CHECK(f32_to_f16(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);  // tie -> even 0x3C00
  CHECK(f32_to_f16(1.0f + std::ldexp(3.0f, -11)) == 0x3C02);  // tie -> even 0x3C02
  CHECK(f32_to_f16(std::ldexp(1.0f, -14) * (1.0f - std::ldexp(1.0f, -12))) == 0x0400);
  CHECK(f32_to_f16(-0.0f) == 0x8000);
  CHECK(f32_to_f16(1e-10f) == 0x0000);
  const uint16_t nan = f32_to_f16(std::numeric_limits<float>::quiet_NaN());
  CHECK((nan & 0x7C00) == 0x7C00);
  CHECK((nan & 0x03FF) != 0);
  CHECK(f32_to_f16(std::bit_cast<float>(0x7F800001u)) != 0x7C00);  // a tiny-payload NaN is not inf
}

TEST_CASE("every non-NaN half survives a round trip through float", "[common]") {
  int mismatches = 0;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF)) continue;  // NaN
    if (f32_to_f16(f16_to_f32(uint16_t(h))) != h) ++mismatches;
  }
  CHECK(mismatches == 0);
}

TEST_CASE("bf16 conversion rounds to nearest even and keeps NaN quiet", "[common]") {
  CHECK(bf16_to_f32(0x3F80) == 1.0f);
  CHECK(bf16_to_f32(0xC040) == -3.0f);
  CHECK(f32_to_bf16(1.0f) == 0x3F80);
  CHECK(f32_to_bf16(std::bit_cast<float>(0x3F808000u)) == 0x3F80);  // exact tie -> even
  CHECK(f32_to_bf16(std::bit_cast<float>(0x3F818000u)) == 0x3F82);  // exact tie -> even (up)
  CHECK(f32_to_bf16(std::bit_cast<float>(0x3F808001u)) == 0x3F81);  // above the tie
  CHECK(f32_to_bf16(std::bit_cast<float>(0x7F7FFFFFu)) == 0x7F80);  // FLT_MAX rounds to inf
  CHECK(f32_to_bf16(std::numeric_limits<float>::infinity()) == 0x7F80);
  CHECK(f32_to_bf16(std::bit_cast<float>(0x7F800001u)) == 0x7FC0);  // signaling NaN -> quiet
  CHECK(f32_to_bf16(std::bit_cast<float>(0xFFC00000u)) == 0xFFC0);
}

TEST_CASE("NaN survives every conversion as a quiet NaN", "[common]") {
  int bad = 0;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const bool nan16 = (h & 0x7C00) == 0x7C00 && (h & 0x3FF);
    if (nan16) {  // f16 NaN -> quiet f32 NaN with the same sign -> an f16 NaN
      const float f = f16_to_f32(uint16_t(h));
      if (!std::isnan(f) || !(std::bit_cast<uint32_t>(f) & 0x400000u) ||
          (std::bit_cast<uint32_t>(f) >> 31) != (h >> 15))
        ++bad;
      const uint16_t back = f32_to_f16(f);
      if ((back & 0x7E00) != 0x7E00 || (back & 0x8000) != (h & 0x8000)) ++bad;
    }
    const bool nanb = (h & 0x7F80) == 0x7F80 && (h & 0x7F);
    if (nanb) {
      const uint16_t back = f32_to_bf16(bf16_to_f32(uint16_t(h)));
      if ((back & 0x7FC0) != 0x7FC0 || (back & 0x8000) != (h & 0x8000)) ++bad;
    } else if (f32_to_bf16(bf16_to_f32(uint16_t(h))) != h) {
      ++bad;  // every non-NaN bf16 survives
    }
  }
  CHECK(bad == 0);
  CHECK(f32_to_f16(std::bit_cast<float>(0x7F800001u)) ==
        0x7E00);  // a tiny payload still gives a NaN, not inf
  CHECK(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isinf(bf16_to_f32(f32_to_bf16(3.4e38f))));  // FLT_MAX-range rounds to inf in bf16
}
