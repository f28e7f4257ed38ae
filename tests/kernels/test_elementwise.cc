// RMSNorm, SwiGLU and RoPE against the naive references; RoPE frequencies and scaling rules
// against values computed independently here.
#include <catch2/catch.hpp>

#include <cmath>

#include "common/error.h"
#include "kernels/rms_norm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "kernels/thread_pool.h"
#include "tests/support/random_weights.h"
#include "tests/support/reference.h"

using namespace kvzip;

TEST_CASE("rms_norm matches the reference, in place and threaded", "[kernels]") {
  kernels::ThreadPool pool(2);
  const uint32_t T = 40, E = 72;
  auto x = test::random_vector(T * E, 1, -3, 3);
  auto w = test::random_vector(E, 2, 0.5f, 1.5f);
  std::vector<float> want(T * E), got = x;
  ref::rms_norm(x.data(), w.data(), want.data(), T, E, 1e-5f);
  rms_norm(kernels::Exec{kernels::Device::Cpu, &pool},
           kernels::RmsNormArgs{got.data(), w.data(), got.data(), T, E, 1e-5f});
  CHECK(test::rel_error(got, want) < 1e-6);
}

TEST_CASE("swiglu matches the reference over a wide input range", "[kernels]") {
  kernels::ThreadPool pool(2);
  const size_t n = 9000 + 5;  // several tasks and a scalar tail
  auto g = test::random_vector(n, 3, -30, 30);
  auto u = test::random_vector(n, 4, -2, 2);
  std::vector<float> got(n), want(n);
  ref::swiglu(g.data(), u.data(), want.data(), n);
  swiglu(kernels::Exec{kernels::Device::Cpu, &pool},
         kernels::SwigluArgs{g.data(), u.data(), got.data(), n});
  for (size_t i = 0; i < n; ++i) REQUIRE(got[i] == Approx(want[i]).epsilon(2e-6).margin(1e-6));
}

TEST_CASE("rope inverse frequencies follow base^(-2i/D)", "[kernels]") {
  auto inv = kernels::rope_inv_freq(8, 10000.0f, RopeScaling{});
  REQUIRE(inv.size() == 4);
  CHECK(inv[0] == 1.0f);
  CHECK(inv[1] == Approx(0.1));
  CHECK(inv[2] == Approx(0.01));
  CHECK(inv[3] == Approx(0.001));
}

TEST_CASE("linear rope scaling divides every frequency by the factor", "[kernels]") {
  RopeScaling s;
  s.kind = RopeScalingKind::Linear;
  s.factor = 4.0f;
  auto plain = kernels::rope_inv_freq(16, 10000.0f, RopeScaling{});
  auto scaled = kernels::rope_inv_freq(16, 10000.0f, s);
  for (size_t i = 0; i < plain.size(); ++i) CHECK(scaled[i] == Approx(plain[i] / 4.0f));
}

TEST_CASE("llama3 rope scaling keeps short wavelengths, divides long ones, blends between",
          "[kernels]") {
  RopeScaling s;
  s.kind = RopeScalingKind::Llama3;
  s.factor = 8.0f;
  s.low_freq_factor = 1.0f;
  s.high_freq_factor = 4.0f;
  s.original_context = 8192;
  const uint32_t D = 128;
  auto plain = kernels::rope_inv_freq(D, 500000.0f, RopeScaling{});
  auto scaled = kernels::rope_inv_freq(D, 500000.0f, s);
  int kept = 0, divided = 0, blended = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    double wavelen = 2 * M_PI / plain[i];
    if (wavelen < 8192.0 / 4) {
      CHECK(scaled[i] == Approx(plain[i]));
      ++kept;
    } else if (wavelen > 8192.0) {
      CHECK(scaled[i] == Approx(plain[i] / 8.0));
      ++divided;
    } else {
      double smooth = (8192.0 / wavelen - 1.0) / 3.0;
      CHECK(scaled[i] == Approx((1 - smooth) * plain[i] / 8.0 + smooth * plain[i]));
      ++blended;
    }
  }
  CHECK(kept > 0);
  CHECK(divided > 0);
  CHECK(blended > 0);
}

TEST_CASE("rope rejects an odd head dimension and bad scaling fields", "[kernels]") {
  CHECK_THROWS_AS(kernels::rope_inv_freq(15, 10000.0f, RopeScaling{}), Error);
  RopeScaling bad;
  bad.kind = RopeScalingKind::Llama3;
  bad.factor = 8.0f;
  bad.original_context = 0;
  CHECK_THROWS_AS(kernels::rope_inv_freq(16, 10000.0f, bad), Error);
}

TEST_CASE("rope rotates half-split pairs like the reference at far positions", "[kernels]") {
  kernels::ThreadPool pool(2);
  const uint32_t T = 50, H = 3, D = 32;
  auto inv = kernels::rope_inv_freq(D, 10000.0f, RopeScaling{});
  std::vector<uint32_t> pos(T);
  for (uint32_t t = 0; t < T; ++t) pos[t] = 7 + 91 * t;  // not contiguous, up to ~4.5K
  auto x = test::random_vector(T * H * D, 5);
  auto want = x, got = x;
  ref::rope(want.data(), T, H, D, pos.data(), inv);
  kernels::RopeTable table;
  build_rope_table(inv, pos.data(), T, &table);
  rope(kernels::Exec{kernels::Device::Cpu, &pool},
       kernels::RopeArgs{got.data(), table.cos.data(), table.sin.data(), T, H, D});
  CHECK(test::rel_error(got, want) < 1e-6);
}

TEST_CASE("rope at position 0 is the identity and preserves each pair's norm", "[kernels]") {
  const uint32_t D = 8;
  auto inv = kernels::rope_inv_freq(D, 10000.0f, RopeScaling{});
  std::vector<uint32_t> pos = {0, 1000};
  auto x = test::random_vector(2 * D, 6);
  auto y = x;
  kernels::RopeTable table;
  build_rope_table(inv, pos.data(), 2, &table);
  rope(kernels::Exec{}, kernels::RopeArgs{y.data(), table.cos.data(), table.sin.data(), 2, 1, D});
  for (uint32_t d = 0; d < D; ++d) CHECK(y[d] == x[d]);
  for (uint32_t i = 0; i < D / 2; ++i) {
    float n0 = std::hypot(x[D + i], x[D + i + D / 2]), n1 = std::hypot(y[D + i], y[D + i + D / 2]);
    CHECK(n1 == Approx(n0).epsilon(1e-6));
  }
}
