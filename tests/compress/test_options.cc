// The compress options' one check (compress/pipeline.h: check_options, check_device,
// check_file_options) and the defaults the front ends take from the library: each bad option
// fails with its error code, in the library's words (an option or a concept, never a flag).
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "compress/head_level.h"
#include "compress/pipeline.h"

using namespace kvzip;

namespace {

// The error `f` throws (Errc::internal and "" when it throws none); its message names no flag.
std::pair<Errc, std::string> failure(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("--") == std::string::npos);
    return {e.code(), e.what()};
  }
  return {Errc::internal, ""};
}

compress::CompressOptions head_level(std::vector<float> scores) {
  compress::CompressOptions o;
  o.method = compress::kHeadLevelMethod;
  o.ratio = compress::default_ratio(o.method);
  o.head.head_scores = std::move(scores);
  return o;
}

}  // namespace

TEST_CASE("the default ratio is the library's: 0.6 of the heads for kvzip-head, else 0.3",
          "[compress]") {
  CHECK(compress::default_ratio(compress::kHeadLevelMethod) == 0.6);
  CHECK(compress::default_ratio("kvzip") == 0.3);
  CHECK(compress::default_ratio("snapkv") == 0.3);
  CHECK(compress::CompressOptions{}.ratio == compress::kDefaultRatio);
}

TEST_CASE("check_options refuses a ratio outside (0, 1], an unknown method, bad head scores",
          "[compress]") {
  compress::CompressOptions o;
  CHECK(failure([&] { compress::check_options(o); }).first == Errc::internal);  // passes
  for (double r : {0.0, -0.5, 1.01, std::nan("")}) {
    o.ratio = r;
    const auto [code, what] = failure([&] { compress::check_options(o); });
    CHECK(code == Errc::invalid_argument);
    CHECK_THAT(what, Catch::Contains("is outside (0, 1]"));
  }
  o.ratio = 1.0;
  CHECK(failure([&] { compress::check_options(o); }).first == Errc::internal);
  o.method = "kvzipp";
  CHECK(failure([&] { compress::check_options(o); }).first == Errc::invalid_argument);

  CHECK(failure([&] {
          compress::check_options(head_level({0.1f, 0.2f}));
        }).first == Errc::internal);
  const auto [none, none_what] = failure([&] { compress::check_options(head_level({})); });
  CHECK(none == Errc::invalid_argument);
  CHECK_THAT(none_what, Catch::Contains("needs head scores"));
  const auto [nan, nan_what] = failure([&] {
    compress::check_options(head_level({0.1f, std::nanf("")}));
  });
  CHECK(nan == Errc::invalid_argument);
  CHECK_THAT(nan_what, Catch::Contains("head score 1 is NaN"));
}

TEST_CASE("check_device: the CPU runs every method, a CUDA device kvzip and full only",
          "[compress]") {
  compress::CompressOptions o;
  for (const char* m : {"kvzip", "full", "snapkv"}) {
    o.method = m;
    CHECK(failure([&] { compress::check_device(o, kernels::Device::Cpu); }).first ==
          Errc::internal);
  }
  for (const char* m : {"kvzip", "full"}) {
    o.method = m;
    CHECK(failure([&] { compress::check_device(o, kernels::Device::Cuda); }).first ==
          Errc::internal);
  }
  o.method = "snapkv";
  CHECK(failure([&] { compress::check_device(o, kernels::Device::Cuda); }).first ==
        Errc::unsupported);
  const auto [code, what] =
      failure([&] { compress::check_device(head_level({0.1f}), kernels::Device::Cuda); });
  CHECK(code == Errc::unsupported);
  CHECK_THAT(what, Catch::Contains("kvzip-head runs on the CPU only"));
}

TEST_CASE("check_file_options adds the query template, the zstd level and the device's limits",
          "[compress]") {
  compress::CompressFileOptions o;
  auto check = [&] { return failure([&] { compress::check_file_options(o); }).first; };
  CHECK(check() == Errc::internal);
  o.compress.ratio = 2.0;  // the compress options' check comes with it
  CHECK(check() == Errc::invalid_argument);
  o.compress.ratio = 0.5;
  o.query_template = "Q: ";
  CHECK(check() == Errc::invalid_argument);
  o.query_template = "Q: {question}";
  for (int z : {-1, 20}) {
    o.write.zstd_level = z;
    CHECK(check() == Errc::invalid_argument);
  }
  o.write.zstd_level = 19;
  CHECK(check() == Errc::internal);
  o.device = kernels::Device::Cuda;
  CHECK(check() == Errc::internal);  // kvzip on a device: no device is needed to check
  o.matmul = kernels::MatmulPath::Exact;
  CHECK(check() == Errc::unsupported);
  o.matmul = kernels::MatmulPath::Fast;
  o.compress = head_level({0.1f});
  CHECK(check() == Errc::unsupported);
}
