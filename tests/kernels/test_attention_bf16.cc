// Attention with bf16 products (AttentionArgs::bf16) against a float64 reference, element by
// element within the bound its rounding allows: q, k, p and v are each rounded to bf16 (relative
// error <= 2^-9), so a logit moves by at most d = 2^-8 · scale · Σ|q·k| of its terms, the
// softmax weights by a factor within e^(±2·max d), and P·V's own roundings add 2^-8 · Σ p·|v|.
// Also: a row's products do not depend on how the call's queries are blocked, two-segment spans
// (which the path does not take) keep the fp32 kernel's bits, and local statistics over odd
// segment starts stay within the same bound.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "kernels/attention.h"
#include "kernels/detail/attention_isa.h"
#include "kernels/detail/bf16_gemm.h"
#include "kernels/qgemv.h"
#include "kernels/thread_pool.h"
#include "tests/support/attention_data.h"
#include "tests/support/random_weights.h"

using namespace kvzip;

namespace {

bool bf16_runs() {
  const kernels::QIsa isa = kernels::qisa_best();
  return KVZIP_ATTENTION_AVX512 && kernels::cpu::detail::bf16_gemm_available() &&
         (isa == kernels::QIsa::Avx512 || isa == kernels::QIsa::Avx512Vnni ||
          isa == kernels::QIsa::Amx);
}

struct Case {
  uint32_t T, Hq, Hkv, D, len, window;
};

using Data = test::AttentionData;

Data make(const Case& c, uint64_t seed) {
  return test::random_attention_data(c.T, c.Hq, c.Hkv, c.D, c.len, seed);
}

kernels::AttentionArgs args(const Case& c, const Data& d, float* out) {
  kernels::AttentionArgs a{d.q.data(), d.spans.data(), out, c.T,
                           c.Hq,       c.Hkv,          c.D, 1.0f / std::sqrt(float(c.D))};
  a.window = c.window;
  return a;
}

// Worst |got - want| / bound over every output element (float64 reference; the bound of the
// file comment, plus 1e-5 for the fp32 sums).
double worst_over_bound(const Case& c, const Data& d, const std::vector<float>& got) {
  const uint32_t G = c.Hq / c.Hkv;
  const double scale = 1.0 / std::sqrt(double(c.D)), u = std::ldexp(1.0, -8);
  double worst = 0;
  for (uint32_t t = 0; t < c.T; ++t) {
    const uint32_t last = c.len - c.T + t,
                   first = c.window && last + 1 > c.window ? last + 1 - c.window : 0;
    for (uint32_t hq = 0; hq < c.Hq; ++hq) {
      const uint32_t h = hq / G;
      const float* q = d.q.data() + (size_t(t) * c.Hq + hq) * c.D;
      std::vector<double> s(last + 1 - first);
      double mx = -INFINITY, dmax = 0, sum = 0;
      for (uint32_t j = first; j <= last; ++j) {
        double dot = 0, mag = 0;
        for (uint32_t e = 0; e < c.D; ++e) {
          const double x = double(q[e]) * d.k[h][size_t(j) * c.D + e];
          dot += x;
          mag += std::fabs(x);
        }
        s[j - first] = dot * scale;
        mx = std::max(mx, s[j - first]);
        dmax = std::max(dmax, u * scale * mag);
      }
      for (double& x : s) sum += (x = std::exp(x - mx));
      for (uint32_t e = 0; e < c.D; ++e) {
        double want = 0, mag = 0;
        for (uint32_t j = first; j <= last; ++j) {
          const double p = s[j - first] / sum, vv = d.v[h][size_t(j) * c.D + e];
          want += p * vv;
          mag += p * std::fabs(vv);
        }
        const double bound = (std::expm1(2 * dmax) + u) * mag + 1e-5;
        const double err = std::fabs(double(got[(size_t(t) * c.Hq + hq) * c.D + e]) - want);
        worst = std::max(worst, err / bound);
      }
    }
  }
  return worst;
}

}  // namespace

TEST_CASE("bf16 attention products stay within their rounding bound of a float64 reference",
          "[kernels]") {
  if (!bf16_runs())
    WARN("no AVX-512 BF16 on this CPU: the bf16 path is not taken, the fp32 one is checked");
  kernels::ThreadPool pool(2);
  for (const Case& c : {Case{300, 9, 3, 64, 700, 0}, Case{200, 8, 2, 128, 200, 0},
                        Case{150, 4, 1, 256, 450, 0}, Case{260, 4, 1, 64, 260, 100}}) {
    CAPTURE(c.T, c.Hq, c.Hkv, c.D, c.len, c.window);
    const Data d = make(c, 7 + c.D);
    std::vector<float> got(d.q.size(), NAN), plain(d.q.size(), NAN);
    kernels::AttentionArgs a = args(c, d, got.data());
    a.bf16 = true;
    attention(kernels::Exec{kernels::Device::Cpu, &pool}, a);
    const double ratio = worst_over_bound(c, d, got);
    WARN("worst error / bound: " << ratio);
    CHECK(ratio <= 1.0);
    a.bf16 = false;
    a.out = plain.data();
    attention(kernels::Exec{kernels::Device::Cpu, &pool}, a);
    // The path ran where it can: the roundings show; elsewhere the flag changes nothing.
    if (bf16_runs()) CHECK(got != plain);
    else CHECK(got == plain);
  }
}

TEST_CASE("bf16 products are the same bits however the queries are blocked; two segments keep fp32",
          "[kernels]") {
  if (!bf16_runs())
    WARN("no AVX-512 BF16 on this CPU: the bf16 path is not taken, the fp32 one is checked");
  kernels::ThreadPool pool(2);
  // One query block (a short question) and one token: the same bound, and the last tokens of a
  // long call get the same bits as a short call of just them (every row walks all its keys in one
  // order, so its roundings do not depend on the other rows).
  const Case whole{300, 9, 3, 64, 700, 0};
  const Data d = make(whole, 3);
  std::vector<float> all(d.q.size(), NAN);
  kernels::AttentionArgs a = args(whole, d, all.data());
  a.bf16 = true;
  attention(kernels::Exec{kernels::Device::Cpu, &pool}, a);
  for (uint32_t T : {1u, 6u}) {
    CAPTURE(T);
    const Case c{T, 9, 3, 64, 700, 0};
    Data tail = make(c, 3);  // same keys and values (seeded per head), new queries...
    const size_t qd = size_t(c.Hq) * c.D;
    std::copy(d.q.end() - T * qd, d.q.end(),
              tail.q.begin());  // ...replaced by the last T of `whole`
    std::vector<float> got(tail.q.size(), NAN);
    kernels::AttentionArgs b = args(c, tail, got.data());
    b.bf16 = true;
    attention(kernels::Exec{kernels::Device::Cpu, &pool}, b);
    CHECK(worst_over_bound(c, tail, got) <= 1.0);
    const std::vector<float> want(all.end() - T * qd, all.end());
    // The fp32 path (no AVX-512 BF16 here) splits a short call's keys across the threads and
    // merges the parts, so there the rows agree to rounding, not bit for bit.
    if (bf16_runs()) CHECK(got == want);
    else CHECK(test::rel_error(got, want) < 1e-5);
  }
  // Two-segment spans (a served request's shared base and private tail).
  const Case c{200, 8, 2, 64, 500, 0};
  Data two = make(c, 5);
  for (uint32_t h = 0; h < c.Hkv; ++h) {
    two.spans[h].k_tail = two.k[h].data() + size_t(300) * c.D;
    two.spans[h].v_tail = two.v[h].data() + size_t(300) * c.D;
    two.spans[h].split = 300;
  }
  std::vector<float> a16(two.q.size(), NAN), a32(two.q.size(), NAN);
  kernels::AttentionArgs t = args(c, two, a16.data());
  t.bf16 = true;
  attention(kernels::Exec{kernels::Device::Cpu, &pool}, t);
  t.bf16 = false;
  t.out = a32.data();
  attention(kernels::Exec{kernels::Device::Cpu, &pool}, t);
  CHECK(a16 == a32);
}

TEST_CASE("bf16 attention with local statistics over odd segment starts stays within the bound",
          "[kernels]") {
  if (!bf16_runs())
    WARN("no AVX-512 BF16 on this CPU: the bf16 path is not taken, the fp32 one is checked");
  kernels::ThreadPool pool(2);
  // KVzip's layout: prefix, document, then the reconstruction input R_t as the T new rows; the
  // target chunk and R_t start at odd rows, so P·V pairs straddle the segments' first rows.
  const Case c{150, 9, 3, 64, 651, 0};
  const Data d = make(c, 11);
  const uint32_t prefix_end = 23, target_begin = 137, target_end = 389, own_begin = c.len - c.T;
  const uint32_t n = target_end - target_begin;
  std::vector<float> got(d.q.size(), NAN), stats16(size_t(c.Hkv) * n, 0.0f), stats32(stats16);
  kernels::LocalMaxProb L{prefix_end, target_begin, target_end, own_begin, stats16.data(), n};
  kernels::AttentionArgs a = args(c, d, got.data());
  a.local = &L;
  a.bf16 = true;
  attention(kernels::Exec{kernels::Device::Cpu, &pool}, a);
  CHECK(worst_over_bound(c, d, got) <= 1.0);
  // The statistics: a probability within e^(±2·max d) of the fp32 kernel's (within 2^-8·scale·
  // Σ|q·k| <= 2^-8 · 2 · 2 · 64 / 8 = 0.125 here, so e^(2·0.125)), plus 1e-6.
  L.out = stats32.data();
  a.bf16 = false;
  a.out = nullptr;
  attention(kernels::Exec{kernels::Device::Cpu, &pool}, a);
  for (size_t i = 0; i < stats16.size(); ++i) {
    CAPTURE(i);
    CHECK(std::fabs(stats16[i] - stats32[i]) <= std::expm1(0.25) * stats32[i] + 1e-6);
  }
}
