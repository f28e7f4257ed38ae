// Device selection and the host-side bf16 rounding, in any build and on any machine: --device
// parsing refuses unknown names and refuses cuda with Errc::unsupported when this build or
// machine cannot run it.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>

#include "common/error.h"
#include "kernels/device.h"
#include "kernels/gpu.h"
#include "tests/support/thrown.h"

using namespace kvzip;

TEST_CASE("--device accepts cpu and refuses unknown names", "[kernels]") {
  CHECK(kernels::parse_device("cpu") == kernels::Device::Cpu);
  const Error e =
      test::error_from([&] { kernels::parse_device("gpu"); }, "expected Errc::invalid_argument");
  CHECK(e.code() == Errc::invalid_argument);
  CHECK(std::string(e.what()).find("'gpu'") != std::string::npos);
}

TEST_CASE("--device cuda works only with a CUDA build and a visible device", "[kernels]") {
  if (kernels::kBuiltWithCuda && kernels::cuda_device_count() > 0) {
    CHECK(kernels::parse_device("cuda") == kernels::Device::Cuda);
    return;
  }
  const Error e =
      test::error_from([&] { kernels::parse_device("cuda"); }, "expected Errc::unsupported");
  CHECK(e.code() == Errc::unsupported);
  CHECK(std::string(e.what()).find("option device cpu") != std::string::npos);
}
