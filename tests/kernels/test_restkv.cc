// ReST-KV's dense steps (kernels/restkv.h) against plain double-precision formulas on random
// inputs: the probe's causal softmax rows with strided queries, and the output change
// ā/(1−ā)·‖W_o(ō − v_j)‖ formed with the full E-sized product (no Gram matrix), over more keys
// than one tile, including a key whose ā is 1 (+inf).
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "common/error.h"
#include "kernels/restkv.h"
#include "tests/support/random_weights.h"

using namespace kvzip;

TEST_CASE("the ReST-KV probe rows are causal softmaxes over the keys", "[kernels]") {
  const uint32_t N = 90, D = 16, w = 12, Hq = 3;
  const std::vector<float> q = test::random_vector(size_t(w) * Hq * D, 1, -2.0f, 2.0f);
  const std::vector<float> k = test::random_vector(size_t(N) * D, 2, -2.0f, 2.0f);
  const float* q1 = q.data() + D;  // query head 1 of (w, Hq, D)
  std::vector<float> got(size_t(w) * N, NAN);
  restkv_probe(kernels::Exec{}, kernels::RestKvProbeArgs{q1, uint64_t(Hq) * D, w, k.data(), N, D,
                                                         0.25f, got.data()});
  for (uint32_t t = 0; t < w; ++t) {
    const uint32_t valid = N - w + t + 1;
    std::vector<double> p(valid);
    double mx = -INFINITY, sum = 0;
    for (uint32_t j = 0; j < valid; ++j) {
      double dot = 0;
      for (uint32_t d = 0; d < D; ++d)
        dot += double(q1[size_t(t) * Hq * D + d]) * k[size_t(j) * D + d];
      mx = std::max(mx, p[j] = 0.25 * dot);
    }
    for (double& x : p) sum += (x = std::exp(x - mx));
    for (uint32_t j = 0; j < N; ++j) {
      INFO("row " << t << " key " << j);
      REQUIRE(got[size_t(t) * N + j] ==
              Approx(j < valid ? p[j] / sum : 0.0).epsilon(1e-5).margin(1e-8));
    }
  }
}

TEST_CASE("the ReST-KV output change equals the norm of the projected output difference",
          "[kernels]") {
  const uint32_t N = 600, n = 590, D = 16, E = 40, Hq = 3, h = 2;
  std::vector<float> abar = test::random_vector(N, 3, 0.0f, 0.004f);
  abar[7] = 1.0f;  // a key holding all the mass: removing it is undefined, scored +inf
  const std::vector<float> v = test::random_vector(size_t(N) * D, 4);
  const std::vector<float> wo = test::random_vector(size_t(E) * Hq * D, 5);  // (E, Hq·D)
  std::vector<float> got(n, NAN);
  const kernels::RestKvOutputChangeArgs a{.abar = abar.data(),
                                          .v = v.data(),
                                          .N = N,
                                          .D = D,
                                          .n = n,
                                          .wo = wo.data() + size_t(h) * D,
                                          .wo_stride = uint64_t(Hq) * D,
                                          .E = E,
                                          .out = got.data()};
  restkv_output_change(kernels::Exec{}, a);
  std::vector<double> obar(D, 0.0);
  for (uint32_t j = 0; j < N; ++j)
    for (uint32_t d = 0; d < D; ++d) obar[d] += double(abar[j]) * v[size_t(j) * D + d];
  for (uint32_t j = 0; j < n; ++j) {
    INFO("key " << j);
    if (abar[j] >= 1.0f) {
      CHECK(std::isinf(got[j]));
      continue;
    }
    double n2 = 0;
    for (uint32_t e = 0; e < E; ++e) {
      double y = 0;
      for (uint32_t d = 0; d < D; ++d)
        y += double(wo[size_t(e) * Hq * D + h * D + d]) * (obar[d] - v[size_t(j) * D + d]);
      n2 += y * y;
    }
    REQUIRE(got[j] == Approx(abar[j] / (1.0 - abar[j]) * std::sqrt(n2)).epsilon(1e-4).margin(1e-9));
  }
}

TEST_CASE("the ReST-KV fronts run on the CPU only", "[kernels]") {
  try {
    restkv_output_change(kernels::Exec{kernels::Device::Cuda}, kernels::RestKvOutputChangeArgs{});
    FAIL("a CUDA exec was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::unsupported);
  }
}
