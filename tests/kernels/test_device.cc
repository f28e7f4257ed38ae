// Device selection and the host-side bf16 rounding, in any build and on any machine: --device
// parsing refuses unknown names and refuses cuda with Errc::unsupported when this build or
// machine cannot run it; to_bf16 rounds to nearest-even and keeps NaN a NaN.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>

#include "common/error.h"
#include "kernels/device.h"
#include "kernels/gpu.h"

using namespace kvzip;

TEST_CASE("--device accepts cpu and refuses unknown names", "[kernels]") {
  CHECK(parse_device("cpu") == Device::Cpu);
  try {
    parse_device("gpu");
    FAIL("expected Errc::invalid_argument");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::invalid_argument);
    CHECK(std::string(e.what()).find("'gpu'") != std::string::npos);
  }
}

TEST_CASE("--device cuda works only with a CUDA build and a visible device", "[kernels]") {
  if (kBuiltWithCuda && cuda_device_count() > 0) {
    CHECK(parse_device("cuda") == Device::Cuda);
    return;
  }
  try {
    parse_device("cuda");
    FAIL("expected Errc::unsupported");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::unsupported);
    CHECK(std::string(e.what()).find("--device cpu") != std::string::npos);
  }
}

TEST_CASE("bf16 rounding is to nearest even and keeps NaN", "[kernels]") {
  CHECK(gpu::to_bf16(1.0f) == 0x3f80);
  CHECK(gpu::from_bf16(gpu::to_bf16(1.0f)) == 1.0f);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
  CHECK(gpu::to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);
  // 1 + 3·2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): rounds up.
  CHECK(gpu::to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);
  CHECK(gpu::to_bf16(-2.5f) == 0xc020);
  CHECK(std::isnan(gpu::from_bf16(gpu::to_bf16(NAN))));
  CHECK(std::isinf(gpu::from_bf16(gpu::to_bf16(INFINITY))));
  // The largest float rounds to infinity in bf16 (its mantissa does not fit).
  CHECK(std::isinf(gpu::from_bf16(gpu::to_bf16(3.4e38f))));
}
