// GEMM and GEMV against the naive reference on random inputs, with and without bias and threads.
#include <catch2/catch.hpp>

#include "common/error.h"
#include "kernels/gemm.h"
#include "kernels/thread_pool.h"
#include "tests/support/random_weights.h"
#include "tests/support/reference.h"

using namespace kvzip;

namespace {

double gemm_error(kernels::ThreadPool* pool, uint32_t T, uint32_t in, uint32_t out,
                  bool with_bias) {
  auto x = test::random_vector(size_t(T) * in, 1);
  auto w = test::random_vector(size_t(out) * in, 2);
  auto b = test::random_vector(out, 3);
  std::vector<float> got(size_t(T) * out, -7.0f), want(got.size());
  kernels::GemmArgs a;
  a.x = x.data();
  a.w = w.data();
  a.bias = with_bias ? b.data() : nullptr;
  a.y = got.data();
  a.T = T;
  a.in = in;
  a.out = out;
  gemm(kernels::Exec{kernels::Device::Cpu, pool}, a);
  ref::gemm(x.data(), w.data(), a.bias, want.data(), T, in, out);
  return test::rel_error(got, want);
}

}  // namespace

TEST_CASE("gemm matches the reference for prefill shapes", "[kernels]") {
  kernels::ThreadPool pool(2);
  CHECK(gemm_error(nullptr, 17, 64, 96, false) < 1e-5);
  CHECK(gemm_error(&pool, 33, 96, 50, true) < 1e-5);
  CHECK(gemm_error(&pool, 2, 7, 3, true) < 1e-5);
}

TEST_CASE("gemv (one token) matches the reference, including odd sizes and bias", "[kernels]") {
  kernels::ThreadPool pool(3);
  CHECK(gemm_error(nullptr, 1, 64, 96, false) < 1e-5);
  CHECK(gemm_error(&pool, 1, 131, 301, true) < 1e-5);  // tails in both dimensions
  CHECK(gemm_error(&pool, 1, 5, 3, false) < 1e-5);
}

TEST_CASE("gemv row by row handles several tokens like gemm", "[kernels]") {
  const uint32_t T = 3, in = 40, out = 70;
  auto x = test::random_vector(T * in, 4);
  auto w = test::random_vector(out * in, 5);
  std::vector<float> got(T * out), want(T * out);
  kernels::GemmArgs a{x.data(), w.data(), nullptr, got.data(), T, in, out};
  kernels::cpu::gemv(nullptr, a);
  ref::gemm(x.data(), w.data(), nullptr, want.data(), T, in, out);
  CHECK(test::rel_error(got, want) < 1e-5);
}

TEST_CASE("a kernel front refuses a device this build lacks", "[kernels]") {
  std::vector<float> x(4), w(4), y(1);
  kernels::GemmArgs a{x.data(), w.data(), nullptr, y.data(), 1, 4, 1};
  CHECK_THROWS_AS(gemm(kernels::Exec{kernels::Device::Cuda, nullptr}, a), Error);
}
