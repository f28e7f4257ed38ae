// Attention with parts (AttentionArgs::parts: the blocks of a composed cache at shifted positions)
// against a plain reference that does what the kernel avoids: every part's keys re-rotated by its
// shift (RoPE by +Δ), all rows in one list with their visibility (the causal rule for the spans,
// the per-token limits and skip bitmaps for the parts), one softmax per query row in double. Parts
// of f32 rows, of q8/q4 rows (dequantized for the reference) and of both; limits that hide rows
// from early tokens; skips; a part that a token cannot see at all; first visible rows per token
// (KvSpan::from: a composed cache's windows by position) on the spans and the f32 parts, in no
// particular order across tokens. Only fp32 rounding may differ.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "common/error.h"
#include "kernels/attention.h"
#include "kernels/kv_quant.h"
#include "kernels/rope.h"
#include "kernels/thread_pool.h"
#include "tests/support/quant_rows.h"
#include "tests/support/reference.h"
#include "tests/support/thrown.h"

using namespace kvzip;

namespace {

constexpr uint32_t kD = 64, kHkv = 2, kG = 3, kHq = kHkv * kG;

std::vector<float> random_rows(size_t rows, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(rows * kD);
  for (float& f : x) f = u(rng);
  return x;
}

// One part of one KV head: f32 rows, optionally quantized rows, visibility.
struct PartHead {
  std::vector<float> k, v;  // (n, D)
  test::QuantHead quant;    // rows == 0: none
  kernels::KvQuantSegment seg;
  std::vector<uint64_t> skip, quant_skip;
  std::vector<uint32_t> limit, quant_limit;  // (T) or empty
  std::vector<uint32_t> from;                // (T) or empty
};

struct Case {
  uint32_t T = 1;
  uint32_t own = 4;                  // rows of the spans (the last T are the new tokens)
  std::vector<uint32_t> shifts;      // per part
  std::vector<uint32_t> f32_rows;    // per part
  std::vector<uint32_t> quant_rows;  // per part (0: none)
  bool skips = false, limits = false;
  bool froms = false;  // KvSpan::from on the spans and on the parts without quantized rows
};

// Runs kernel and reference; returns max |kernel - ref| / max |ref|.
double run_case(const Case& c, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  const uint32_t T = c.T, n_parts = static_cast<uint32_t>(c.shifts.size());
  const std::vector<float> q = random_rows(size_t(T) * kHq, rng);
  std::vector<std::vector<float>> own_k(kHkv), own_v(kHkv);
  std::vector<kernels::KvSpan> spans(kHkv);
  // Each token's first own row: somewhere at or below itself, jumping around across tokens.
  std::vector<uint32_t> own_from(T);
  for (uint32_t t = 0; t < T; ++t) own_from[t] = (c.own - T + t) * ((t * 7) % 5) / 5;
  for (uint32_t h = 0; h < kHkv; ++h) {
    own_k[h] = random_rows(c.own, rng);
    own_v[h] = random_rows(c.own, rng);
    spans[h] = kernels::KvSpan{own_k[h].data(), own_v[h].data(), c.own};
    if (c.froms) spans[h].from = own_from.data();
  }
  std::vector<PartHead> ph(size_t(n_parts) * kHkv);
  std::vector<kernels::KvSpan> parts(ph.size());
  const kernels::KvQuantLayout layout{4, kD, kD, true, true};
  for (uint32_t p = 0; p < n_parts; ++p) {
    for (uint32_t h = 0; h < kHkv; ++h) {
      PartHead& x = ph[size_t(p) * kHkv + h];
      const uint32_t n = c.f32_rows[p], nq = c.quant_rows[p];
      x.k = random_rows(n, rng);
      x.v = random_rows(n, rng);
      kernels::KvSpan& s = parts[size_t(p) * kHkv + h];
      s = kernels::KvSpan{n ? x.k.data() : nullptr, n ? x.v.data() : nullptr, n};
      if (nq) {
        x.quant = test::quantized_head(layout, nq, seed * 31 + p * 7 + h);
        x.seg = x.quant.segment();
        s.quant = &x.seg;
      }
      if (c.skips) {
        x.skip.assign((n + 63) / 64 + 1, 0);
        for (uint32_t j = 0; j < n; j += 3) x.skip[j / 64] |= uint64_t(1) << (j % 64);
        x.quant_skip.assign((nq + 63) / 64 + 1, 0);
        for (uint32_t j = 1; j < nq; j += 4) x.quant_skip[j / 64] |= uint64_t(1) << (j % 64);
        s.skip = x.skip.data();
        s.quant_skip = nq ? x.quant_skip.data() : nullptr;
      }
      if (c.limits) {  // token t sees a growing prefix of the part; token 0 sees none of it
        for (uint32_t t = 0; t < T; ++t) {
          x.limit.push_back(n * t / std::max(1u, T - 1));
          x.quant_limit.push_back(nq * t / std::max(1u, T - 1));
        }
        s.limit = x.limit.data();
        s.quant_limit = nq ? x.quant_limit.data() : nullptr;
      }
      if (c.froms && nq == 0) {  // every third token sees none of the part
        for (uint32_t t = 0; t < T; ++t) x.from.push_back(t % 3 == 2 ? n : n * t / (2 * T));
        s.from = x.from.data();
      }
    }
  }
  // Each part's query rotation: by -shift (cos, then sin negated).
  const std::vector<float> inv_freq = kernels::rope_inv_freq(kD, 10000.0f, RopeScaling{});
  std::vector<float> rot(size_t(n_parts) * kD);
  for (uint32_t p = 0; p < n_parts; ++p) {
    kernels::RopeTable tab;
    kernels::build_rope_table(inv_freq, &c.shifts[p], 1, &tab);
    for (uint32_t i = 0; i < kD / 2; ++i) {
      rot[size_t(p) * kD + i] = tab.cos[i];
      rot[size_t(p) * kD + kD / 2 + i] = -tab.sin[i];
    }
  }
  std::vector<float> out(size_t(T) * kHq * kD, NAN);
  kernels::ThreadPool pool(2);
  kernels::AttentionArgs a{q.data(), spans.data(), out.data(), T, kHq, kHkv, kD, 0.125f};
  a.parts = parts.data();
  a.part_rot = rot.data();
  a.n_parts = n_parts;
  kernels::cpu::attention(&pool, a);

  // Reference: one list of rows per head.
  double err = 0, mag = 0;
  for (uint32_t h = 0; h < kHkv; ++h) {
    struct Row {
      std::vector<float> k, v;
      std::vector<bool> seen;  // (T)
    };
    std::vector<Row> rows;
    for (uint32_t j = 0; j < c.own; ++j) {
      Row r{{own_k[h].begin() + j * kD, own_k[h].begin() + (j + 1) * kD},
            {own_v[h].begin() + j * kD, own_v[h].begin() + (j + 1) * kD},
            {}};
      for (uint32_t t = 0; t < T; ++t)
        r.seen.push_back(j <= c.own - T + t && (!c.froms || j >= own_from[t]));
      rows.push_back(std::move(r));
    }
    for (uint32_t p = 0; p < n_parts; ++p) {
      const PartHead& x = ph[size_t(p) * kHkv + h];
      const uint32_t n = c.f32_rows[p], nq = c.quant_rows[p];
      std::vector<float> dk(size_t(nq) * kD), dv(size_t(nq) * kD);
      if (nq) {
        kernels::cpu::kv_dequantize_rows(x.seg.k, dk.data());
        kernels::cpu::kv_dequantize_rows(x.seg.v, dv.data());
      }
      auto add = [&](const float* k, const float* v, uint32_t j, bool skipped,
                     const std::vector<uint32_t>& lim, const std::vector<uint32_t>& from) {
        Row r{{k, k + kD}, {v, v + kD}, {}};
        std::vector<uint32_t> pos(1, c.shifts[p]);
        ref::rope(r.k.data(), 1, 1, kD, pos.data(), inv_freq);
        for (uint32_t t = 0; t < T; ++t)
          r.seen.push_back(!skipped && (lim.empty() || j < lim[t]) &&
                           (from.empty() || j >= from[t]));
        rows.push_back(std::move(r));
      };
      for (uint32_t j = 0; j < n; ++j)
        add(x.k.data() + size_t(j) * kD, x.v.data() + size_t(j) * kD, j,
            c.skips && kernels::skip_bit(x.skip.data(), j), x.limit, x.from);
      for (uint32_t j = 0; j < nq; ++j)
        add(dk.data() + size_t(j) * kD, dv.data() + size_t(j) * kD, j,
            c.skips && kernels::skip_bit(x.quant_skip.data(), j), x.quant_limit, {});
    }
    for (uint32_t t = 0; t < T; ++t) {
      for (uint32_t g = 0; g < kG; ++g) {
        const uint32_t hq = h * kG + g;
        const float* qv = q.data() + (size_t(t) * kHq + hq) * kD;
        std::vector<double> logit(rows.size(), -INFINITY);
        double mx = -INFINITY;
        for (size_t j = 0; j < rows.size(); ++j) {
          if (!rows[j].seen[t]) continue;
          double s = 0;
          for (uint32_t d = 0; d < kD; ++d) s += double(qv[d]) * rows[j].k[d];
          logit[j] = 0.125 * s;
          mx = std::max(mx, logit[j]);
        }
        std::vector<double> o(kD, 0.0);
        double sum = 0;
        for (size_t j = 0; j < rows.size(); ++j) {
          if (!rows[j].seen[t]) continue;
          const double w = std::exp(logit[j] - mx);
          sum += w;
          for (uint32_t d = 0; d < kD; ++d) o[d] += w * rows[j].v[d];
        }
        REQUIRE(sum > 0);  // every token sees at least itself
        const float* got = out.data() + (size_t(t) * kHq + hq) * kD;
        for (uint32_t d = 0; d < kD; ++d) {
          const double want = o[d] / sum;
          err = std::max(err, std::abs(got[d] - want));
          mag = std::max(mag, std::abs(want));
        }
      }
    }
  }
  return err / mag;
}

}  // namespace

TEST_CASE("attention over parts at shifted positions matches re-rotated keys", "[kernels]") {
  SECTION("f32 parts, decode") {
    CHECK(run_case({1, 5, {0, 300, 4000}, {40, 7, 300}, {0, 0, 0}}, 1) < 2e-5);
  }
  SECTION("f32 parts, a question block") {
    CHECK(run_case({9, 20, {11, 2500}, {130, 260}, {0, 0}}, 2) < 2e-5);
  }
  SECTION("quantized parts with f32 rows and without") {
    CHECK(run_case({3, 6, {100, 900}, {5, 0}, {300, 70}}, 3) < 2e-5);
  }
  SECTION("skips and per-token limits") {
    CHECK(run_case({6, 12, {17, 600}, {150, 9}, {0, 270}, true, true}, 4) < 2e-5);
  }
  SECTION("first visible rows per token on the spans alone (no parts)") {
    CHECK(run_case({40, 700, {}, {}, {}, false, false, true}, 5) < 2e-5);
  }
  SECTION("first visible rows per token with limits, skips and quantized parts") {
    CHECK(run_case({12, 300, {40, 900, 77}, {400, 0, 30}, {0, 70, 0}, true, true, true}, 6) < 2e-5);
  }
}

TEST_CASE("attention parts are CPU only, and a wrong rotation is visible", "[kernels]") {
  kernels::KvSpan span{nullptr, nullptr, 0};
  kernels::AttentionArgs a{nullptr, &span, nullptr, 1, 1, 1, kD, 1.0f};
  a.n_parts = 1;
  a.parts = &span;
  CHECK(test::throws_code([&] { kernels::check_cuda_attention(a); }, Errc::unsupported));
  // First visible rows (KvSpan::from) are CPU only too, and refused over quantized rows.
  const uint32_t from = 0;
  kernels::KvSpan windowed{nullptr, nullptr, 0};
  windowed.from = &from;
  kernels::AttentionArgs w{nullptr, &windowed, nullptr, 1, 1, 1, kD, 1.0f};
  CHECK(test::throws_code([&] { kernels::check_cuda_attention(w); }, Errc::unsupported));
  const kernels::KvQuantSegment seg{};
  windowed.quant = &seg;
  CHECK(test::throws_code([&] { kernels::check_window(w); }, Errc::unsupported));
  w.kv = &span;
  w.parts = &windowed;
  w.n_parts = 1;
  CHECK(test::throws_code([&] { kernels::check_window(w); }, Errc::unsupported));
  // The reference must tell the kernel's shift apart from another one: a case where the parts sit
  // at shift 0 in the kernel but the reference rotates by 1000 has to fail the bound.
  std::mt19937 rng(5);
  std::vector<float> q = random_rows(kHq, rng), k = random_rows(50, rng), v = random_rows(50, rng);
  std::vector<float> own_k = random_rows(1, rng), own_v = random_rows(1, rng);
  std::vector<kernels::KvSpan> spans(kHkv, kernels::KvSpan{own_k.data(), own_v.data(), 1});
  std::vector<kernels::KvSpan> parts(kHkv, kernels::KvSpan{k.data(), v.data(), 50});
  std::vector<float> no_rot(kD), shifted(kD);
  const std::vector<float> inv_freq = kernels::rope_inv_freq(kD, 10000.0f, RopeScaling{});
  kernels::RopeTable tab;
  const uint32_t shift = 1000;
  kernels::build_rope_table(inv_freq, &shift, 1, &tab);
  for (uint32_t i = 0; i < kD / 2; ++i) {
    no_rot[i] = 1.0f, no_rot[kD / 2 + i] = 0.0f;
    shifted[i] = tab.cos[i], shifted[kD / 2 + i] = -tab.sin[i];
  }
  std::vector<float> o1(size_t(kHq) * kD), o2(size_t(kHq) * kD);
  kernels::ThreadPool pool(1);
  kernels::AttentionArgs b{q.data(), spans.data(), o1.data(), 1, kHq, kHkv, kD, 0.125f};
  b.parts = parts.data();
  b.n_parts = 1;
  b.part_rot = no_rot.data();
  kernels::cpu::attention(&pool, b);
  b.out = o2.data();
  b.part_rot = shifted.data();
  kernels::cpu::attention(&pool, b);
  double diff = 0;
  for (size_t i = 0; i < o1.size(); ++i) diff = std::max(diff, double(std::abs(o1[i] - o2[i])));
  CHECK(diff > 1e-3);
}
