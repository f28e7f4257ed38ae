// attention_stats (kernels/attention_stats.h) against a plain double-precision reference on random
// inputs: one to three key ranges with a causal last one, a sub-range of query tokens, column
// windows that start inside the first range and end inside the causal one, max and sum reductions
// combined into an output that already holds values, serial and on a pool.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/error.h"
#include "kernels/attention_stats.h"
#include "kernels/thread_pool.h"
#include "tests/support/random_weights.h"

using namespace kvzip;

namespace {

struct Case {
  uint32_t T, Hq, Hkv, D;
  std::vector<uint32_t> fixed;  // rows of the fixed ranges (0 to 2 of them)
  uint32_t causal_base;         // rows of the causal range before the first query token
  uint32_t t0, t1, col0, col1;
};

void run_case(const Case& c, kernels::Reduce op, kernels::ThreadPool* pool, uint64_t seed) {
  const uint32_t G = c.Hq / c.Hkv;
  const std::vector<float> q = test::random_vector(size_t(c.T) * c.Hq * c.D, seed, -2.0f, 2.0f);
  std::vector<std::vector<float>> keys;  // per head: the ranges back to back
  std::vector<kernels::ScoreKeyAxis> axes(c.Hkv);
  uint32_t fixed = 0;
  for (uint32_t n : c.fixed) fixed += n;
  const uint32_t causal_rows = c.causal_base + c.T;
  for (uint32_t h = 0; h < c.Hkv; ++h)
    keys.push_back(
        test::random_vector(size_t(fixed + causal_rows) * c.D, seed * 7 + h, -2.0f, 2.0f));
  for (uint32_t h = 0; h < c.Hkv; ++h) {
    uint32_t off = 0, r = 0;
    for (uint32_t n : c.fixed) {
      axes[h].ranges[r++] = kernels::ScoreKeyRange{keys[h].data() + size_t(off) * c.D, n};
      off += n;
    }
    axes[h].ranges[r++] = kernels::ScoreKeyRange{keys[h].data() + size_t(off) * c.D, causal_rows};
    axes[h].n_ranges = r;
    axes[h].causal_base = c.causal_base;
  }
  const uint32_t width = c.col1 - c.col0;
  const uint64_t stride = width + 3;
  std::vector<float> init = test::random_vector(c.Hkv * stride, seed + 99, 0.0f, 0.05f);
  std::vector<double> want(init.begin(), init.end());
  const double scale = 1.0 / std::sqrt(double(c.D));
  for (uint32_t h = 0; h < c.Hkv; ++h)
    for (uint32_t i = c.t0; i < c.t1; ++i)
      for (uint32_t g = 0; g < G; ++g) {
        const float* qi = q.data() + (size_t(i) * c.Hq + h * G + g) * c.D;
        const uint32_t visible = fixed + c.causal_base + i + 1;
        std::vector<double> p(visible);
        for (uint32_t j = 0; j < visible; ++j) {
          double dot = 0;
          for (uint32_t d = 0; d < c.D; ++d) dot += double(qi[d]) * keys[h][size_t(j) * c.D + d];
          p[j] = dot * scale;
        }
        const double mx = *std::max_element(p.begin(), p.end());
        double sum = 0;
        for (double& x : p) sum += (x = std::exp(x - mx));
        for (uint32_t col = c.col0; col < std::min(c.col1, visible); ++col) {
          double& o = want[h * stride + col - c.col0];
          o = op == kernels::Reduce::Max ? std::max(o, p[col] / sum) : o + p[col] / sum;
        }
      }
  std::vector<float> got = init;
  const kernels::AttentionStatsArgs a{.q = q.data(),
                                      .T = c.T,
                                      .Hq = c.Hq,
                                      .Hkv = c.Hkv,
                                      .D = c.D,
                                      .scale = float(scale),
                                      .t0 = c.t0,
                                      .t1 = c.t1,
                                      .axes = axes.data(),
                                      .col0 = c.col0,
                                      .col1 = c.col1,
                                      .reduce = op,
                                      .out = got.data(),
                                      .out_stride = stride};
  attention_stats(kernels::Exec{kernels::Device::Cpu, pool}, a);
  for (size_t x = 0; x < got.size(); ++x) {
    INFO("output " << x);
    REQUIRE(got[x] == Approx(want[x]).epsilon(1e-5).margin(1e-7));
  }
}

}  // namespace

TEST_CASE("attention statistics equal the plain reference", "[kernels]") {
  kernels::ThreadPool pool(2);
  const std::vector<Case> cases = {
      {20, 4, 2, 16, {}, 5, 0, 20, 0, 25},         // one causal range, every column
      {37, 6, 2, 16, {11, 30}, 4, 3, 37, 5, 70},   // three ranges, columns into the causal one
      {9, 3, 3, 8, {200}, 0, 2, 9, 150, 205},      // G = 1, window straddling the ranges
      {130, 4, 1, 32, {40}, 17, 100, 130, 0, 40},  // more query tiles than threads, Hkv = 1
  };
  uint64_t seed = 1;
  for (const Case& c : cases)
    for (kernels::Reduce op : {kernels::Reduce::Max, kernels::Reduce::Sum})
      for (kernels::ThreadPool* p : {static_cast<kernels::ThreadPool*>(nullptr), &pool}) {
        INFO("case T " << c.T << " Hq " << c.Hq << (op == kernels::Reduce::Max ? " max" : " sum")
                       << (p ? " pool" : " serial"));
        run_case(c, op, p, seed++);
      }
}

TEST_CASE("attention statistics run on the CPU only", "[kernels]") {
  kernels::AttentionStatsArgs a;
  try {
    attention_stats(kernels::Exec{kernels::Device::Cuda}, a);
    FAIL("a CUDA exec was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::unsupported);
  }
}
