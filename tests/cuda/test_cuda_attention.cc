// [cuda] parity of the CUDA attention kernels with the CPU oracle on fresh random inputs (fp32,
// tolerance 2e-5 relative): flash-style prefill (empty cache, cached prefix, ragged heads, partial
// query tiles), split-row decode (many splits, ragged heads far apart in length, a few appended
// tokens so the causal mask cuts inside the last split), split-K over short query blocks (up to
// 128 query rows per KV head: a 10-40 token question over a long cache, row groups cut by the
// causal mask, splits widened past 32K rows), both paths on the same inputs, and the
// KVzip score kernel against the CPU scorer's attention_stats (max over the GQA group and all
// query rows of the local softmax), combined by max into outputs that already hold values.
// Host-side checks that need no device (unsupported head dim) run in any CUDA build. Test cases
// tagged [sanitize] are small enough for compute-sanitizer's memcheck and racecheck
// (scripts/gpu-check.sh) and still reach every kernel and branch: prefill, split-K decode with
// several splits and row groups, and the score kernel.
#include <catch2/catch.hpp>

#include <cmath>

#include "tests/cuda/support.h"

#if KVZIP_HAVE_CUDA
#include "common/error.h"
#include "kernels/attention.h"
#include "kernels/attention_score.h"
#include "kernels/attention_stats.h"
#include "tests/support/random_weights.h"

using namespace kvzip;
using test::gpu_ready;
using test::to_gpu;

namespace {

enum class Path { Auto, Prefill, Decode };

struct Case {
  uint32_t T, Hq, Hkv, D;
  std::vector<uint32_t> lens;  // per KV head, each >= T
};

// Runs the CUDA path and the CPU kernel on the same random inputs; returns the relative error.
double gpu_attention_error(const Case& c, Path path, uint64_t salt) {
  const uint64_t seed = test::seed(salt);
  auto q = test::random_vector(size_t(c.T) * c.Hq * c.D, seed, -2, 2);
  std::vector<std::vector<float>> k(c.Hkv), v(c.Hkv);
  std::vector<kernels::gpu::GpuBuffer<float>> dk, dv;
  std::vector<kernels::KvSpan> spans(c.Hkv), dspans(c.Hkv);
  for (uint32_t h = 0; h < c.Hkv; ++h) {
    k[h] = test::random_vector(size_t(c.lens[h]) * c.D, seed * 31 + h, -2, 2);
    v[h] = test::random_vector(size_t(c.lens[h]) * c.D, seed * 37 + h);
    spans[h] = kernels::KvSpan{k[h].data(), v[h].data(), c.lens[h]};
    dk.push_back(to_gpu(k[h]));
    dv.push_back(to_gpu(v[h]));
    dspans[h] = kernels::KvSpan{dk.back().data(), dv.back().data(), c.lens[h]};
  }
  std::vector<float> want(q.size());
  kernels::AttentionArgs a{q.data(), spans.data(), want.data(), c.T,
                           c.Hq,     c.Hkv,        c.D,         1.0f / std::sqrt(float(c.D))};
  attention(kernels::Exec{}, a);
  auto dq = to_gpu(q);
  auto dout = test::poisoned(q.size());
  kernels::AttentionArgs g = a;
  g.q = dq.data();
  g.kv = dspans.data();
  g.out = dout.data();
  switch (path) {
    case Path::Auto: attention(kernels::Exec{kernels::Device::Cuda, nullptr, nullptr}, g); break;
    case Path::Prefill: kernels::cuda::attention_prefill(g, nullptr); break;
    case Path::Decode: kernels::cuda::attention_decode(g, nullptr); break;
  }
  return test::rel_error(dout.download(), want);
}

}  // namespace

TEST_CASE("cuda prefill attention matches the CPU kernel", "[cuda]") {
  if (!gpu_ready()) return;
  CHECK(gpu_attention_error({70, 4, 2, 64, {70, 70}}, Path::Prefill, 1) < 2e-5);  // empty cache
  CHECK(gpu_attention_error({150, 9, 3, 64, {150, 150, 150}}, Path::Prefill, 2) < 2e-5);  // G = 3
  CHECK(gpu_attention_error({33, 8, 2, 128, {300, 300}}, Path::Prefill, 3) <
        2e-5);                                                                  // cached prefix
  CHECK(gpu_attention_error({5, 2, 2, 128, {5, 5}}, Path::Prefill, 4) < 2e-5);  // G = 1, tiny
  CHECK(gpu_attention_error({64, 32, 8, 128, {64, 64, 64, 64, 64, 64, 64, 64}}, Path::Auto, 5) <
        2e-5);
}

TEST_CASE("cuda prefill attention handles ragged per-head lengths", "[cuda]") {
  if (!gpu_ready()) return;
  CHECK(gpu_attention_error({12, 6, 3, 64, {12, 140, 61}}, Path::Prefill, 6) < 2e-5);
  CHECK(gpu_attention_error({40, 8, 2, 128, {41, 1000}}, Path::Prefill, 7) < 2e-5);
}

TEST_CASE("cuda split-row decode attention matches the CPU kernel over ragged heads", "[cuda]") {
  if (!gpu_ready()) return;
  // One token over heads of very different lengths: 1 row, part of one split, many splits.
  CHECK(gpu_attention_error({1, 12, 4, 128, {1, 700, 3000, 33}}, Path::Decode, 8) < 2e-5);
  CHECK(gpu_attention_error({1, 9, 3, 64, {5000, 257, 256}}, Path::Auto, 9) < 2e-5);
  // Three appended tokens with G = 4 (12 rows): the causal cut falls inside the last split, and
  // one head's last split starts past what the first new token may see.
  CHECK(gpu_attention_error({3, 8, 2, 128, {258, 515}}, Path::Decode, 10) < 2e-5);
  CHECK(gpu_attention_error({4, 16, 4, 64, {4, 40, 300, 1030}}, Path::Decode, 11) < 2e-5);
}

TEST_CASE("cuda decode and prefill paths agree on the same short append", "[cuda]") {
  if (!gpu_ready()) return;
  const Case c{2, 8, 2, 64, {600, 129}};
  CHECK(gpu_attention_error(c, Path::Decode, 12) < 2e-5);
  CHECK(gpu_attention_error(c, Path::Prefill, 12) < 2e-5);
}

TEST_CASE("cuda split-K attention serves short query blocks over long caches", "[cuda]") {
  if (!gpu_ready()) return;
  // A 20-token question, G = 3 (60 rows, 4 row groups) over a long, ragged compressed cache: the
  // path attention() picks for it, and the split-K kernel called directly.
  const Case question{20, 9, 3, 64, {5000, 1200, 300}};
  CHECK(gpu_attention_error(question, Path::Auto, 31) < 2e-5);
  CHECK(gpu_attention_error(question, Path::Decode, 31) < 2e-5);
  // 90 rows (not a whole number of row groups), D = 128, a head holding only the new tokens.
  CHECK(gpu_attention_error({30, 12, 4, 128, {3000, 30, 900, 257}}, Path::Decode, 32) < 2e-5);
  // G = 1, 100 new tokens after 200 cached rows: the first row groups see only split 0 (their
  // blocks of split 1 exit early), a later group straddles the split boundary.
  CHECK(gpu_attention_error({100, 2, 2, 64, {300, 2000}}, Path::Decode, 33) < 2e-5);
  // 128 rows exactly: the largest block the split path takes.
  CHECK(gpu_attention_error({32, 16, 4, 64, {32, 700, 4000, 129}}, Path::Auto, 34) < 2e-5);
  // Past 128 · 256 rows the splits widen (512 rows here) so there are at most 128 of them.
  CHECK(gpu_attention_error({8, 4, 1, 64, {40000}}, Path::Decode, 35) < 2e-5);
  CHECK(gpu_attention_error({1, 4, 1, 64, {40000}}, Path::Auto, 36) < 2e-5);
}

TEST_CASE("cuda split-K and prefill paths agree on a question-sized block", "[cuda]") {
  if (!gpu_ready()) return;
  const Case c{40, 9, 3, 64, {2600, 900, 41}};  // 120 rows
  CHECK(gpu_attention_error(c, Path::Decode, 37) < 2e-5);
  CHECK(gpu_attention_error(c, Path::Prefill, 37) < 2e-5);
  // One row more than the split path takes: attention() sends it to prefill, still correct.
  CHECK(gpu_attention_error({43, 9, 3, 64, {2600, 900, 43}}, Path::Auto, 38) < 2e-5);
}

TEST_CASE("cuda attention refuses local statistics and a missing output", "[cuda]") {
  // Host-side checks in make_params: no device needed, nothing is launched.
  alignas(16) static float dummy[64];
  kernels::KvSpan span{dummy, dummy, 4};
  kernels::LocalMaxProb local{0, 0, 2, 2, dummy, 4};
  kernels::AttentionArgs a{dummy, &span, nullptr, 1, 1, 1, 64, 0.1f, &local};
  CHECK_THROWS_MATCHES(kernels::cuda::attention_decode(a, nullptr), Error,
                       Catch::Matchers::Predicate<Error>(
                           [](const Error& e) { return e.code() == Errc::unsupported; }));
  CHECK_THROWS_MATCHES(kernels::cuda::attention_prefill(a, nullptr), Error,
                       Catch::Matchers::Predicate<Error>(
                           [](const Error& e) { return e.code() == Errc::unsupported; }));
  a.local = nullptr;
  CHECK_THROWS_MATCHES(
      kernels::cuda::attention(a, nullptr), Error,
      Catch::Matchers::Predicate<Error>([](const Error& e) { return e.code() == Errc::internal; }));
}

TEST_CASE("cuda attention refuses head dims it has no kernel for", "[cuda]") {
  // Host-side dispatch: no device needed, nothing is launched.
  alignas(16) static float dummy[4];
  kernels::KvSpan span{dummy, dummy, 1};
  kernels::AttentionArgs a{dummy, &span, dummy, 1, 1, 1, 96, 0.1f};
  try {
    kernels::cuda::attention_prefill(a, nullptr);
    FAIL("expected Errc::unsupported");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::unsupported);
    CHECK(std::string(e.what()).find("head_dim 96") != std::string::npos);
  }
}

namespace {

struct ScoreCase {
  uint32_t T, Hq, Hkv, D;
  uint32_t n_p, m, causal_base;  // prefix rows, chunk rows, R_t rows before this call's tokens
};

// KVzip-shaped key axes: [prefix ; chunk ; R_t (causal)] in one dense per-head key array of
// n_p + doc + causal_base + T rows, the chunk at row n_p + chunk_at.
double gpu_score_error(const ScoreCase& c, uint64_t salt) {
  const uint64_t seed = test::seed(salt);
  const uint32_t doc = c.m + 40, chunk_at = 20, rows = c.n_p + doc + c.causal_base + c.T;
  const uint32_t r0 = c.n_p + doc;
  auto q = test::random_vector(size_t(c.T) * c.Hq * c.D, seed, -2, 2);
  std::vector<std::vector<float>> k(c.Hkv);
  std::vector<kernels::gpu::GpuBuffer<float>> dk;
  std::vector<kernels::ScoreKeyAxis> axes(c.Hkv);
  std::vector<kernels::ScoreKeyAxis> daxes(c.Hkv);
  for (uint32_t h = 0; h < c.Hkv; ++h) {
    k[h] = test::random_vector(size_t(rows) * c.D, seed * 41 + h, -2, 2);
    dk.push_back(to_gpu(k[h]));
    const float* hk = k[h].data();
    const float* dkh = dk.back().data();
    axes[h].ranges[0] = {hk, c.n_p};
    axes[h].ranges[1] = {hk + size_t(c.n_p + chunk_at) * c.D, c.m};
    axes[h].ranges[2] = {hk + size_t(r0) * c.D, c.causal_base + c.T};
    axes[h].n_ranges = 3;
    axes[h].causal_base = c.causal_base;
    daxes[h].ranges[0] = {dkh, c.n_p};
    daxes[h].ranges[1] = {dkh + size_t(c.n_p + chunk_at) * c.D, c.m};
    daxes[h].ranges[2] = {dkh + size_t(r0) * c.D, c.causal_base + c.T};
    daxes[h].n_ranges = 3;
    daxes[h].causal_base = c.causal_base;
  }
  // Outputs that already hold values (an earlier call's maxima): both sides must combine by max.
  const uint64_t stride = c.m + 3;
  auto start = test::random_vector(size_t(c.Hkv) * stride, seed + 7, 0.0f, 0.02f);
  auto want = start;
  const kernels::AttentionStatsArgs a{.q = q.data(),
                                      .T = c.T,
                                      .Hq = c.Hq,
                                      .Hkv = c.Hkv,
                                      .D = c.D,
                                      .scale = 1.0f / std::sqrt(float(c.D)),
                                      .t0 = 0,
                                      .t1 = c.T,
                                      .axes = axes.data(),
                                      .col0 = c.n_p,
                                      .col1 = c.n_p + c.m,
                                      .reduce = kernels::Reduce::Max,
                                      .out = want.data(),
                                      .out_stride = stride};
  attention_stats(kernels::Exec{}, a);

  auto dq = to_gpu(q);
  auto dout = to_gpu(start);
  kernels::AttentionScoreArgs g;
  g.q = dq.data();
  g.T = c.T;
  g.Hq = c.Hq;
  g.Hkv = c.Hkv;
  g.D = c.D;
  g.scale = a.scale;
  g.axes = daxes.data();
  g.col0 = a.col0;
  g.col1 = a.col1;
  g.out = dout.data();
  g.out_stride = stride;
  attention_score_max(kernels::Exec{kernels::Device::Cuda, nullptr, nullptr}, g);
  auto got = dout.download();
  // The stride's tail columns were never part of the reduction: untouched on both sides.
  for (uint32_t h = 0; h < c.Hkv; ++h)
    for (uint64_t j = c.m; j < stride; ++j) REQUIRE(got[h * stride + j] == start[h * stride + j]);
  return test::rel_error(got, want);
}

}  // namespace

TEST_CASE("cuda KVzip score kernel matches the CPU scorer's local-softmax max", "[cuda]") {
  if (!gpu_ready()) return;
  CHECK(gpu_score_error({50, 8, 2, 128, 30, 100, 0}, 21) < 2e-5);     // whole R_t in one call
  CHECK(gpu_score_error({70, 9, 3, 64, 17, 61, 45}, 22) < 2e-5);      // later slice of R_t, G = 3
  CHECK(gpu_score_error({1, 4, 1, 64, 5, 33, 300}, 23) < 2e-5);       // one token, long causal part
  CHECK(gpu_score_error({200, 32, 8, 128, 40, 250, 10}, 24) < 2e-5);  // Llama-3 head layout
}

TEST_CASE("cuda attention kernels on small shapes (for the sanitizers)", "[cuda][sanitize]") {
  if (!gpu_ready()) return;
  CHECK(gpu_attention_error({40, 4, 2, 64, {70, 45}}, Path::Prefill, 41) < 2e-5);
  CHECK(gpu_attention_error({1, 4, 2, 128, {600, 33}}, Path::Decode, 42) < 2e-5);
  CHECK(gpu_attention_error({20, 6, 2, 64, {300, 20}}, Path::Decode, 43) < 2e-5);  // 3 row groups
  CHECK(gpu_score_error({20, 4, 2, 64, 9, 40, 5}, 44) < 2e-5);
}

#else

TEST_CASE("cuda attention kernels are skipped in a CPU-only build", "[cuda]") {
  CHECK_FALSE(kvzip::test::gpu_ready());
}

#endif
