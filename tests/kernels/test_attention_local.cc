// Attention with local statistics (AttentionArgs::local, the fused KVzip score) against a plain
// double-precision reference: the max over the group's heads and all tokens of each target row's
// probability under the softmax over prefix ⊕ target ⊕ own rows. Ranges start and end inside key
// tiles (128 rows) and cross them; T spans several query blocks (shared transposed keys) or one
// (per-task keys); statistics-only calls (no output) give the same statistics.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.h"
#include "kernels/attention.h"
#include "kernels/thread_pool.h"
#include "tests/support/attention_data.h"
#include "tests/support/random_weights.h"
#include "tests/support/reference.h"

using namespace kvzip;

namespace {

struct LocalCase {
  uint32_t T, Hq, Hkv, D, len;  // every head has len rows, the last T new
  uint32_t prefix_end, target_begin, target_end, own_begin;
};

using Data = test::AttentionData;

Data make_data(const LocalCase& c, uint64_t seed) {
  return test::random_attention_data(c.T, c.Hq, c.Hkv, c.D, c.len, seed);
}

// want[h][j - target_begin], computed plainly.
std::vector<double> reference_stats(const LocalCase& c, const Data& d) {
  const uint32_t G = c.Hq / c.Hkv, n = c.target_end - c.target_begin, n0 = c.len - c.T;
  std::vector<double> want(size_t(c.Hkv) * n, 0.0);
  for (uint32_t h = 0; h < c.Hkv; ++h)
    for (uint32_t i = 0; i < c.T; ++i) {
      std::vector<uint32_t> rows;
      for (uint32_t j = 0; j < c.prefix_end; ++j) rows.push_back(j);
      for (uint32_t j = c.target_begin; j < c.target_end; ++j) rows.push_back(j);
      for (uint32_t j = c.own_begin; j <= n0 + i; ++j) rows.push_back(j);
      for (uint32_t g = 0; g < G; ++g) {
        const float* q = d.q.data() + (size_t(i) * c.Hq + h * G + g) * c.D;
        std::vector<double> logit(rows.size());
        double mx = -INFINITY, sum = 0;
        for (size_t r = 0; r < rows.size(); ++r) {
          double s = 0;
          for (uint32_t e = 0; e < c.D; ++e) s += double(q[e]) * d.k[h][size_t(rows[r]) * c.D + e];
          logit[r] = s / std::sqrt(double(c.D));
          mx = std::max(mx, logit[r]);
        }
        for (double& x : logit) sum += (x = std::exp(x - mx));
        for (uint32_t j = 0; j < n; ++j) {
          double& w = want[size_t(h) * n + j];
          w = std::max(w, logit[c.prefix_end + j] / sum);
        }
      }
    }
  return want;
}

struct Result {
  std::vector<float> stats, out, out_plain;
};

// One call with statistics (and output unless stats_only), one without, both on `pool`.
Result run(const LocalCase& c, const Data& d, kernels::ThreadPool* pool, bool stats_only,
           float init = 0.0f) {
  const uint32_t n = c.target_end - c.target_begin;
  Result r;
  r.stats.assign(size_t(c.Hkv) * (n + 3), init);  // rows n + 3 apart: out_stride != n
  kernels::LocalMaxProb L{c.prefix_end, c.target_begin, c.target_end,
                          c.own_begin,  r.stats.data(), n + 3};
  r.out.assign(d.q.size(), NAN);
  r.out_plain.assign(d.q.size(), NAN);
  kernels::AttentionArgs a{d.q.data(),
                           d.spans.data(),
                           r.out_plain.data(),
                           c.T,
                           c.Hq,
                           c.Hkv,
                           c.D,
                           1.0f / std::sqrt(float(c.D))};
  attention(kernels::Exec{kernels::Device::Cpu, pool}, a);
  a.local = &L;
  a.out = stats_only ? nullptr : r.out.data();
  attention(kernels::Exec{kernels::Device::Cpu, pool}, a);
  return r;
}

double stats_error(const LocalCase& c, const Result& r, const std::vector<double>& want) {
  const uint32_t n = c.target_end - c.target_begin;
  double worst = 0;
  for (uint32_t h = 0; h < c.Hkv; ++h)
    for (uint32_t j = 0; j < n; ++j)
      worst = std::max(worst, std::abs(r.stats[size_t(h) * (n + 3) + j] - want[size_t(h) * n + j]));
  return worst;
}

}  // namespace

TEST_CASE("local statistics equal the plain local softmax and leave the attention output intact",
          "[kernels]") {
  kernels::ThreadPool pool(2);
  const LocalCase cases[] = {
      // Several query blocks; the target crosses two tile edges; prefix and target not adjacent.
      {40, 9, 3, 64, 700, 5, 37, 300, 660},
      // One query block (keys transposed per task); prefix empty; earlier own rows before the T.
      {3, 6, 2, 32, 300, 0, 0, 131, 290},
      // Head dim off the vector width; target right after the prefix; own rows = the T only.
      {20, 4, 2, 20, 260, 7, 7, 200, 240},
  };
  uint64_t seed = 40;
  for (const LocalCase& c : cases) {
    INFO("T=" << c.T << " len=" << c.len << " target [" << c.target_begin << ", " << c.target_end
              << ")");
    const Data d = make_data(c, ++seed);
    const std::vector<double> want = reference_stats(c, d);
    const Result r = run(c, d, &pool, false);
    CHECK(stats_error(c, r, want) < 2e-6);
    CHECK(test::rel_error(r.out, r.out_plain) < 1e-5);  // same attention, other summation order
    std::vector<float> ref_out(d.q.size());
    kernels::AttentionArgs a{d.q.data(),
                             d.spans.data(),
                             ref_out.data(),
                             c.T,
                             c.Hq,
                             c.Hkv,
                             c.D,
                             1.0f / std::sqrt(float(c.D))};
    ref::attention(a);
    CHECK(test::rel_error(r.out, ref_out) < 1e-5);
    // Statistics only, serially: the same statistics.
    const Result s = run(c, d, nullptr, true);
    CHECK(stats_error(c, s, want) < 2e-6);
    // Rows between a head's stride are never written.
    const uint32_t n = c.target_end - c.target_begin;
    CHECK(s.stats[n] == 0.0f);
    CHECK(s.stats[n + 2] == 0.0f);
  }
}

TEST_CASE("local statistics are max-combined with what the output row already holds", "[kernels]") {
  const LocalCase c{12, 4, 2, 16, 400, 3, 50, 180, 380};
  const Data d = make_data(c, 77);
  const std::vector<double> want = reference_stats(c, d);
  kernels::ThreadPool pool(2);
  const Result r = run(c, d, &pool, false, 0.25f);
  const uint32_t n = c.target_end - c.target_begin;
  bool some_below = false;
  for (uint32_t h = 0; h < c.Hkv; ++h)
    for (uint32_t j = 0; j < n; ++j) {
      const double w = want[size_t(h) * n + j];
      some_below |= w < 0.25;
      CHECK(std::abs(r.stats[size_t(h) * (n + 3) + j] - std::max(w, 0.25)) < 2e-6);
    }
  CHECK(some_below);  // the starting value matters somewhere
}

TEST_CASE("attention on the cuda device refuses local statistics before dispatch, on any build",
          "[kernels]") {
  // The CUDA kernels have no LocalMaxProb path: the front says so (Errc::unsupported naming what
  // is missing) rather than asserting on the null output or ignoring the statistics. Checked
  // before dispatch, so a CPU-only build gives this error, not "no cuda implementation".
  alignas(16) static float dummy[64];
  kernels::KvSpan span{dummy, dummy, 4};
  float stats[4] = {};
  kernels::LocalMaxProb local{0, 0, 2, 2, stats, 4};
  kernels::AttentionArgs a{dummy, &span, nullptr, 1, 1, 1, 16, 0.25f, &local};
  for (float* out : {static_cast<float*>(nullptr), dummy}) {
    a.out = out;
    try {
      attention(kernels::Exec{kernels::Device::Cuda, nullptr, nullptr}, a);
      FAIL("expected Errc::unsupported");
    } catch (const Error& e) {
      CHECK(e.code() == Errc::unsupported);
      CHECK(std::string(e.what()).find("local statistics") != std::string::npos);
      CHECK(std::string(e.what()).find("LocalMaxProb") != std::string::npos);
    }
  }
  // Without statistics there is nothing to compute with no output: a caller bug.
  a.local = nullptr;
  a.out = nullptr;
  try {
    kernels::check_cuda_attention(a);
    FAIL("expected Errc::internal");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::internal);
  }
  CHECK(stats[0] == 0.0f);  // nothing was written by any refused call
}
