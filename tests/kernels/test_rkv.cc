// R-KV's importance and redundancy kernels (kernels/rkv.h) against the plain reference of
// tests/support/rkv_reference.h on random inputs: strided grouped queries over more keys than one
// importance tile, the redundancy's tiled backward scan over keys with near and far repeats and
// lone keys, hand-built copies showing that the latest copy of a repeat is spared, and the device
// check of the front.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "common/error.h"
#include "kernels/rkv.h"
#include "tests/support/random_weights.h"
#include "tests/support/rkv_reference.h"

using namespace kvzip;

namespace {

void check_close(const std::vector<float>& got, const std::vector<double>& want, double rel) {
  REQUIRE(got.size() == want.size());
  double scale = 0;
  for (double x : want) scale = std::max(scale, std::abs(x));
  for (size_t j = 0; j < want.size(); ++j) {
    INFO("entry " << j << ": " << got[j] << " vs " << want[j]);
    REQUIRE(std::abs(got[j] - want[j]) <= rel * std::abs(want[j]) + 1e-6 * scale);
  }
}

std::vector<float> importance(const std::vector<float>& q, uint32_t tokens, uint64_t stride,
                              uint32_t G, uint32_t D, const std::vector<float>& k, uint32_t n,
                              uint32_t kernel) {
  std::vector<float> out(n, NAN);
  const kernels::RkvImportanceArgs a{.q = q.data(),
                                     .tokens = tokens,
                                     .q_stride = stride,
                                     .G = G,
                                     .D = D,
                                     .scale = 1.0f / std::sqrt(float(D)),
                                     .k = k.data(),
                                     .n = n,
                                     .kernel = kernel,
                                     .out = out.data()};
  rkv_importance(kernels::Exec{}, a);
  return out;
}

std::vector<float> redundancy(const std::vector<float>& k, uint32_t n, uint32_t D, float T) {
  std::vector<float> out(n, NAN);
  rkv_redundancy(kernels::Exec{}, kernels::RkvRedundancyArgs{k.data(), n, D, T, out.data()});
  return out;
}

}  // namespace

TEST_CASE("R-KV importance equals the plain reference, strided queries, several key tiles",
          "[kernels]") {
  struct Case {
    uint32_t tokens, G, D, n, kernel, heads;  // queries (tokens, heads·G, D): read one group
  };
  for (const Case c :
       {Case{8, 3, 16, 70, 7, 2}, Case{3, 2, 8, 2500, 5, 3}, Case{1, 1, 4, 1, 7, 1}}) {
    INFO("n " << c.n << " G " << c.G);
    const uint64_t stride = uint64_t(c.heads) * c.G * c.D;
    const std::vector<float> q = test::random_vector(c.tokens * stride, c.n + 1, -2.0f, 2.0f);
    const std::vector<float> k = test::random_vector(size_t(c.n) * c.D, c.n + 2);
    const uint32_t group = c.heads - 1;  // the last group of the row: the stride matters
    const float* qg = q.data() + size_t(group) * c.G * c.D;
    const std::vector<float> q_group(qg, q.data() + q.size());
    check_close(importance(q_group, c.tokens, stride, c.G, c.D, k, c.n, c.kernel),
                test::rkv_importance(qg, c.tokens, stride, c.G, c.D, 1.0 / std::sqrt(double(c.D)),
                                     k.data(), c.n, c.kernel),
                1e-4);
  }
}

TEST_CASE("R-KV redundancy's tiled scan equals the materialised matrix", "[kernels]") {
  // 700 keys over 100 directions plus noise (many repeats, some far back) and 50 lone random keys
  // (rows with no similar key: their scan reaches the first candidate), and one zero key.
  const uint32_t n = 750, D = 16;
  const std::vector<float> base = test::random_vector(100 * D, 71);
  const std::vector<float> noise = test::random_vector(n * D, 72, -0.3f, 0.3f);
  const std::vector<float> pick = test::random_vector(n, 73, 0.0f, 100.0f);
  const std::vector<float> lone = test::random_vector(50 * D, 74);
  std::vector<float> k(n * D);
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t d = 0; d < D; ++d)
      k[i * D + d] =
          i % 15 == 0 ? lone[(i / 15) * D + d] : base[uint32_t(pick[i]) * D + d] + noise[i * D + d];
  for (uint32_t d = 0; d < D; ++d) k[400 * D + d] = 0.0f;
  for (float T : {0.5f, 0.9f, -1.0f}) {
    INFO("threshold " << T);
    check_close(redundancy(k, n, D, T), test::rkv_redundancy(k.data(), n, D, T), 1e-4);
  }
}

TEST_CASE(
    "R-KV redundancy zeroes each row's most recent similar key: the latest copy scores lowest",
    "[kernels]") {
  // Keys e1, e2, 2·e1, e3, 0.5·e1 (D = 4): rows 0, 2, 4 are copies. Rows 0 and 2 lose their entry
  // for row 4 (the most recent copy), row 4 loses its entry for row 2: column sums 2, 0, 1, 0, 0.
  const std::vector<float> k = {1, 0, 0, 0, 0, 1, 0, 0, 2, 0, 0, 0, 0, 0, 1, 0, 0.5f, 0, 0, 0};
  const std::vector<float> R = redundancy(k, 5, 4, 0.5f);
  const std::vector<double> want = test::softmax({2.0 / 5, 0.0, 1.0 / 5, 0.0, 0.0});
  for (uint32_t j = 0; j < 5; ++j) CHECK(R[j] == Approx(want[j]).epsilon(1e-6));
  CHECK(R[4] < R[2]);
  CHECK(R[2] < R[0]);
  // With T = 1 no similarity exceeds it: nothing is zeroed, the three copies are equally redundant.
  const std::vector<float> R1 = redundancy(k, 5, 4, 1.0f);
  CHECK(R1[0] == Approx(R1[4]).epsilon(1e-6));
  CHECK(R1[2] == Approx(R1[4]).epsilon(1e-6));
  CHECK(R1[0] > R1[1]);
}

TEST_CASE("the R-KV fronts run on the CPU only", "[kernels]") {
  const std::vector<float> k = {1, 0};
  float out = 0;
  try {
    rkv_redundancy(kernels::Exec{kernels::Device::Cuda},
                   kernels::RkvRedundancyArgs{k.data(), 1, 2, 0.5f, &out});
    FAIL("a CUDA exec was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::unsupported);
  }
}
