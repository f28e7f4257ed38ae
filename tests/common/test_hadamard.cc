// The Walsh–Hadamard rotation (common/hadamard.h) against an explicit matrix product with the
// Sylvester matrix H[i][j] = (-1)^popcount(i & j) / √n on random input, its own inverse, the
// binary32 factor, one hand-computed case that pins the butterfly order, and the vector path (on
// CPUs that have it) bit for bit the plain loop's.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <vector>

#include "common/hadamard.h"
#include "tests/support/random_weights.h"

using namespace kvzip;

TEST_CASE("hadamard_rotate equals the explicit H matrix product", "[common][hadamard]") {
  const uint32_t n = GENERATE(2u, 4u, 8u, 64u, 128u, 256u);
  const std::vector<float> x = test::random_vector(n, 17 + n, -3.0f, 3.0f);
  std::vector<float> y = x;
  hadamard_rotate(y.data(), n);
  double norm_x = 0, norm_y = 0;
  for (uint32_t i = 0; i < n; ++i) {
    double want = 0;
    for (uint32_t j = 0; j < n; ++j) want += (std::popcount(i & j) % 2 ? -1.0 : 1.0) * double(x[j]);
    want /= std::sqrt(double(n));
    INFO("n " << n << " output " << i);
    // log2(n) rounded additions of values up to Σ|x|, then one rounded product.
    REQUIRE(std::fabs(double(y[i]) - want) <=
            1e-6 * (std::log2(double(n)) + 1) * 3.0 * std::sqrt(double(n)));
    norm_x += double(x[i]) * x[i];
    norm_y += double(y[i]) * y[i];
  }
  CHECK(std::fabs(norm_x - norm_y) <= 1e-5 * norm_x);  // orthonormal
}

TEST_CASE("hadamard_rotate is its own inverse up to rounding", "[common][hadamard]") {
  const uint32_t n = GENERATE(16u, 64u, 128u);
  const std::vector<float> x = test::random_vector(n, 5, -1.0f, 1.0f);
  std::vector<float> y = x;
  hadamard_rotate(y.data(), n);
  hadamard_rotate(y.data(), n);
  for (uint32_t i = 0; i < n; ++i) REQUIRE(std::fabs(y[i] - x[i]) <= 1e-6f);
}

TEST_CASE("hadamard: the factor and the butterfly order, by hand", "[common][hadamard]") {
  CHECK(hadamard_scale(64) == 0.125f);  // a power of four: exact
  CHECK(hadamard_scale(4) == 0.5f);
  CHECK(hadamard_scale(128) == static_cast<float>(1.0 / std::sqrt(128.0)));
  CHECK(hadamard_size(2));
  CHECK(hadamard_size(4096));
  CHECK_FALSE(hadamard_size(1));
  CHECK_FALSE(hadamard_size(96));
  CHECK_FALSE(hadamard_size(0));
  // n = 4, x = (1, 2, 3, 4): h = 1 -> (3, -1, 7, -1); h = 2 -> (10, -2, -4, 0); × 1/2.
  std::vector<float> x = {1, 2, 3, 4};
  hadamard_rotate(x.data(), 4);
  CHECK(x == std::vector<float>{5, -1, -2, 0});
}

TEST_CASE("hadamard_rotate gives the plain loop's bits at every size", "[common][hadamard]") {
  const uint32_t n = GENERATE(2u, 4u, 8u, 16u, 32u, 64u, 128u, 256u, 1024u, 4096u);
  // Magnitudes over many binades, so that the additions round and a changed order would show.
  std::vector<float> x = test::random_vector(n, 91 + n, -1.0f, 1.0f);
  for (uint32_t i = 0; i < n; ++i) x[i] = std::ldexp(x[i], int(i * 7 % 23) - 11);
  std::vector<float> got = x, want = x;
  hadamard_rotate(got.data(), n);
  hadamard_rotate_reference(want.data(), n);
  for (uint32_t i = 0; i < n; ++i) {
    INFO("n " << n << " output " << i);
    REQUIRE(std::bit_cast<uint32_t>(got[i]) == std::bit_cast<uint32_t>(want[i]));
  }
}
