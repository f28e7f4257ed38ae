// [cuda_emu] the CUDA kernels (kernels/cuda/*.cu; all but the cuBLAS GEMM), run
// on the CPU emulator (tests/cuda_emu/emu.h: one OS thread per CUDA thread, real barriers and warp
// shuffles), against the CPU kernels, on every machine: what the [cuda] tests check on a device,
// at sizes an emulator runs in seconds. Attention (2e-5 relative, as on a device): the flash
// prefill kernel (cached prefix, ragged heads, partial query tiles), split-K decode and question
// blocks (several splits, row groups cut by the causal mask, splits widened past 128 · 256 rows),
// and over quantized spans every layout, decode, blocks cut into split-K blocks, widened quantized
// splits, heads without quantized rows. The score kernel against the CPU scorer's local-softmax
// max (attention_stats, Reduce::Max), into outputs that already hold values. kv_quant:
// dequantization bit for bit, scores within 1e-5. The forward's element-wise kernels (RMSNorm,
// RoPE, SwiGLU, the ragged append, bf16 cast, residual add, embedding gather) with the
// tolerances of the [cuda] tests (fp32 1e-5, bf16 one rounding; exact where the CPU is exact). What
// this cannot show (speed, a device's memory and scheduling) stays with the [cuda] tests and
// compute-sanitizer on a GPU (scripts/gpu-check.sh).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "common/half.h"
#include "kernels/attention.h"
#include "kernels/attention_score.h"
#include "kernels/attention_stats.h"
#include "kernels/kv_append.h"
#include "kernels/kv_quant.h"
#include "kernels/rms_norm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "tests/support/quant_rows.h"
#include "tests/support/random_weights.h"
#include "tests/support/thrown.h"

namespace kvzip::kernels::cuda_emu {  // the emulated twins (tests/CMakeLists.txt: kvzip_cuda_emu)
void attention(const AttentionArgs& a, void* stream);
void attention_prefill(const AttentionArgs& a, void* stream);
void attention_decode(const AttentionArgs& a, void* stream);
void kv_dequantize_rows(const KvQuantRows& in, float* x, void* stream);
void kv_quant_scores(const float* q, uint32_t n_q, const KvQuantRows& k, float scale, float* scores,
                     void* stream);
void attention_score_max(const AttentionScoreArgs& a, void* stream);
void rope(const RopeArgs& a, void* stream);
void rms_norm(const RmsNormArgs& a, void* stream);
void rms_norm_bf16(const RmsNormArgs& a, uint16_t* y_bf16, void* stream);
void swiglu(const SwigluArgs& a, void* stream);
void swiglu_bf16(const SwigluArgs& a, uint16_t* y_bf16, void* stream);
void kv_append(const KvAppendArgs& a, void* stream);
void to_bf16(const float* x, uint16_t* y, size_t n, void* stream);
void add_in_place(float* x, const float* y, size_t n, void* stream);
void embed_bf16(const uint16_t* table, const int32_t* tokens, float* x, uint32_t T, uint32_t E,
                void* stream);
}  // namespace kvzip::kernels::cuda_emu

using namespace kvzip;
namespace emu = kvzip::kernels::cuda_emu;

namespace {

enum class Path { Auto, Prefill, Decode };

// T query tokens, heads, and per KV head its quantized rows (none when empty) and f32 rows (>= T).
struct Case {
  uint32_t T, Hq, Hkv, D;
  std::vector<uint32_t> f32;
  std::vector<uint32_t> quant = {};
  uint32_t bits = 4, group = 0;  // group 0: D
  bool rotated = true, byte_params = true;
};

struct Head {
  std::vector<float> k, v;
  test::QuantHead quant;
  kernels::KvQuantSegment seg;
};

// The emulated kernels and the CPU kernel on the same random rows; the relative error.
double attention_error(const Case& c, Path path, uint64_t seed) {
  const kernels::KvQuantLayout L{c.bits, c.D, c.group ? c.group : c.D, c.rotated, c.byte_params};
  const auto q = test::random_vector(size_t(c.T) * c.Hq * c.D, seed, -2, 2);
  std::vector<Head> heads(c.Hkv);
  std::vector<kernels::KvSpan> spans(c.Hkv);
  for (uint32_t h = 0; h < c.Hkv; ++h) {
    Head& H = heads[h];
    const size_t D = c.D, nf = c.f32[h], nq = c.quant.empty() ? 0 : c.quant[h];
    H.k = test::random_vector(nf * D, seed * 31 + h, -2, 2);
    H.v = test::random_vector(nf * D, seed * 37 + h);
    spans[h] = kernels::KvSpan{H.k.data(), H.v.data(), c.f32[h]};
    if (!nq) continue;
    H.quant = test::quantized_head(L, nq, seed * 7 + h);
    H.seg = H.quant.segment();
    spans[h].quant = &H.seg;
  }
  std::vector<float> want(q.size()), got(q.size(), NAN);
  kernels::AttentionArgs a{q.data(), spans.data(), want.data(), c.T,
                           c.Hq,     c.Hkv,        c.D,         1.0f / std::sqrt(float(c.D))};
  kernels::cpu::attention(nullptr, a);
  a.out = got.data();
  switch (path) {
    case Path::Auto: emu::attention(a, nullptr); break;
    case Path::Prefill: emu::attention_prefill(a, nullptr); break;
    case Path::Decode: emu::attention_decode(a, nullptr); break;
  }
  INFO("T " << c.T << " Hq " << c.Hq << " Hkv " << c.Hkv << " D " << c.D << " quantized "
            << !c.quant.empty() << " q" << c.bits << " rotated " << c.rotated << " byte params "
            << c.byte_params);
  return test::rel_error(got, want);
}

}  // namespace

TEST_CASE("emulated cuda prefill attention matches the CPU kernel", "[cuda_emu]") {
  // A cached prefix, ragged heads, query tiles cut by T; D 64 and 128.
  CHECK(attention_error({40, 4, 2, 64, {70, 45}}, Path::Prefill, 1) < 2e-5);
  CHECK(attention_error({33, 6, 2, 128, {33, 100}}, Path::Prefill, 2) < 2e-5);
  // One row past the split path: attention() takes prefill.
  CHECK(attention_error({43, 9, 3, 64, {300, 90, 43}}, Path::Auto, 3) < 2e-5);
}

TEST_CASE("emulated cuda split-K attention matches the CPU kernel", "[cuda_emu]") {
  // Decode over several splits of ragged heads; a question block of 3 row groups cut by the mask.
  CHECK(attention_error({1, 4, 2, 128, {600, 33}}, Path::Decode, 4) < 2e-5);
  CHECK(attention_error({20, 6, 2, 64, {300, 20}}, Path::Decode, 5) < 2e-5);
  // G = 1, 40 new tokens straddling the split boundary at 256; 128 rows exactly.
  CHECK(attention_error({40, 2, 2, 64, {270, 600}}, Path::Auto, 6) < 2e-5);
  CHECK(attention_error({32, 8, 2, 64, {32, 300}}, Path::Auto, 7) < 2e-5);
}

TEST_CASE("emulated cuda attention over quantized spans matches the CPU kernel, every layout",
          "[cuda_emu]") {
  struct Form {
    bool rotated, byte_params;
  };
  for (const Form f : {Form{false, false}, Form{true, false}, Form{true, true}, Form{false, true}})
    for (uint32_t bits : {8u, 4u}) {
      INFO("rotated " << f.rotated << " byte params " << f.byte_params << " q" << bits);
      // Decode, GQA 3: quantized rows in one split, in two, and none.
      CHECK(attention_error(
                {1, 6, 3, 64, {5, 1, 40}, {40, 300, 0}, bits, 64, f.rotated, f.byte_params},
                Path::Auto, 10 + bits + f.rotated * 2 + f.byte_params) < 2e-5);
      // A 9-token question, D = 128, two groups per row (GQA 2: 18 rows, 2 row groups).
      CHECK(attention_error({9, 4, 2, 128, {9, 70}, {100, 33}, bits, 64, f.rotated, f.byte_params},
                            Path::Decode, 30 + bits + f.rotated * 2 + f.byte_params) < 2e-5);
    }
}

TEST_CASE("emulated cuda attention cuts long blocks over quantized spans; prefill refuses them",
          "[cuda_emu]") {
  // 70 tokens · G 2 = 140 rows: blocks of 64 and 6 tokens; the causal limit moves with them.
  CHECK(attention_error({70, 4, 2, 64, {70, 100}, {40, 300}, 4, 32, true, false}, Path::Auto, 50) <
        2e-5);
  CHECK(attention_error({130, 2, 2, 64, {130, 131}, {257, 1}, 8, 64, false, false}, Path::Auto,
                        51) < 2e-5);
  const Error e = test::error_from(
      [] {
        attention_error({40, 4, 1, 64, {40}, {10}}, Path::Prefill, 52);
      },
      "expected Errc::unsupported");
  CHECK(e.code() == Errc::unsupported);
}

TEST_CASE("emulated cuda attention widens the splits past 128 · 256 rows", "[cuda_emu]") {
  // 33,000 rows: splits of 512 rows, f32 and quantized (the f32 rows then only the new token).
  CHECK(attention_error({1, 2, 1, 64, {33000}}, Path::Decode, 8) < 2e-5);
  CHECK(attention_error({1, 2, 1, 64, {1}, {33000}}, Path::Auto, 60) < 2e-5);
}

TEST_CASE("emulated cuda kv_quant kernels: dequantization bit for bit, scores", "[cuda_emu]") {
  for (bool rotated : {false, true})
    for (bool byte_params : {false, true})
      for (uint32_t bits : {8u, 4u})
        for (uint32_t D : {64u, 128u}) {
          INFO("rotated " << rotated << " byte params " << byte_params << " q" << bits << " D "
                          << D);
          const kernels::KvQuantLayout L{bits, D, 32, rotated, byte_params};
          const size_t n = 70;
          const uint64_t seed = bits * 100 + D + rotated * 7 + byte_params * 3;
          auto x = test::random_vector(n * D, seed, -1, 1);
          for (size_t i = 0; i < x.size(); ++i)
            if (i % D % 13 == 5) x[i] *= 9.0f;
          std::vector<float> c(D);
          std::vector<uint16_t> p(n * L.param_words());
          std::vector<uint8_t> codes(n * L.code_bytes());
          kernels::cpu::kv_quantize_rows(x.data(), {L, n, c.data(), p.data(), codes.data()});
          const kernels::KvQuantRows rows{L, n, c.data(), p.data(), codes.data()};
          std::vector<float> want(n * D), got(n * D, NAN);
          kernels::cpu::kv_dequantize_rows(rows, want.data());
          emu::kv_dequantize_rows(rows, got.data(), nullptr);
          CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
          const auto q = test::random_vector(3 * D, seed + 1, -1, 1);
          std::vector<float> s_want(3 * n), s_got(3 * n, NAN);
          kernels::cpu::kv_quant_scores(q.data(), 3, rows, 0.125f, s_want.data());
          emu::kv_quant_scores(q.data(), 3, rows, 0.125f, s_got.data(), nullptr);
          CHECK(test::rel_error(s_got, s_want) < 1e-5);
        }
}

namespace {

// The KVzip score kernel's key axes [prefix ; chunk ; causal R_t] over one per-head key array
// (n_p + doc + causal_base + T rows, the chunk at row n_p + 20), against attention_stats; outputs
// start from earlier maxima. Returns the relative error.
double score_error(uint32_t T, uint32_t Hq, uint32_t Hkv, uint32_t D, uint32_t n_p, uint32_t m,
                   uint32_t causal_base, uint64_t seed) {
  const uint32_t doc = m + 40, rows = n_p + doc + causal_base + T, r0 = n_p + doc;
  const auto q = test::random_vector(size_t(T) * Hq * D, seed, -2, 2);
  std::vector<std::vector<float>> k(Hkv);
  std::vector<kernels::ScoreKeyAxis> axes(Hkv);
  for (uint32_t h = 0; h < Hkv; ++h) {
    k[h] = test::random_vector(size_t(rows) * D, seed * 41 + h, -2, 2);
    axes[h].ranges[0] = {k[h].data(), n_p};
    axes[h].ranges[1] = {k[h].data() + size_t(n_p + 20) * D, m};
    axes[h].ranges[2] = {k[h].data() + size_t(r0) * D, causal_base + T};
    axes[h].n_ranges = 3;
    axes[h].causal_base = causal_base;
  }
  const uint64_t stride = m + 3;
  const auto start = test::random_vector(size_t(Hkv) * stride, seed + 7, 0.0f, 0.02f);
  auto want = start, got = start;
  const float scale = 1.0f / std::sqrt(float(D));
  const kernels::AttentionStatsArgs a{.q = q.data(),
                                      .T = T,
                                      .Hq = Hq,
                                      .Hkv = Hkv,
                                      .D = D,
                                      .scale = scale,
                                      .t0 = 0,
                                      .t1 = T,
                                      .axes = axes.data(),
                                      .col0 = n_p,
                                      .col1 = n_p + m,
                                      .reduce = kernels::Reduce::Max,
                                      .out = want.data(),
                                      .out_stride = stride};
  attention_stats(kernels::Exec{}, a);
  kernels::AttentionScoreArgs g;
  g.q = q.data();
  g.T = T, g.Hq = Hq, g.Hkv = Hkv, g.D = D, g.scale = scale;
  g.axes = axes.data();
  g.col0 = n_p, g.col1 = n_p + m;
  g.out = got.data();
  g.out_stride = stride;
  emu::attention_score_max(g, nullptr);
  for (uint32_t h = 0; h < Hkv; ++h)  // the stride's tail was never part of the reduction
    for (uint64_t j = m; j < stride; ++j) REQUIRE(got[h * stride + j] == start[h * stride + j]);
  return test::rel_error(got, want);
}

}  // namespace

TEST_CASE("emulated cuda KVzip score kernel matches the CPU scorer's local-softmax max",
          "[cuda_emu]") {
  CHECK(score_error(40, 4, 2, 128, 30, 70, 0, 90) < 2e-5);  // the whole R_t in one call
  CHECK(score_error(35, 6, 2, 64, 17, 61, 45, 91) < 2e-5);  // a later slice of R_t, G = 3
  CHECK(score_error(1, 4, 1, 64, 5, 33, 100, 92) < 2e-5);   // one token, a long causal part
}

namespace {

std::vector<float> widen(const std::vector<uint16_t>& b) {
  std::vector<float> r(b.size());
  for (size_t i = 0; i < b.size(); ++i) r[i] = bf16_to_f32(b[i]);
  return r;
}

std::vector<uint16_t> to_bf16_host(const std::vector<float>& x) {
  std::vector<uint16_t> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = f32_to_bf16(x[i]);
  return r;
}

}  // namespace

TEST_CASE("emulated cuda element-wise kernels match the CPU ones", "[cuda_emu]") {
  {  // RMSNorm, in place and into bf16; a width that is not a multiple of the block
    const uint32_t T = 5, E = 576;
    const auto x = test::random_vector(size_t(T) * E, 101, -3, 3);
    const auto w = test::random_vector(E, 102, 0.5f, 1.5f);
    std::vector<float> want(x.size());
    kernels::cpu::rms_norm(nullptr,
                           kernels::RmsNormArgs{x.data(), w.data(), want.data(), T, E, 1e-5f});
    auto y = x;
    emu::rms_norm(kernels::RmsNormArgs{y.data(), w.data(), y.data(), T, E, 1e-5f}, nullptr);
    CHECK(test::rel_error(y, want) < 1e-5);
    std::vector<uint16_t> y16(x.size(), 0xFFFF);
    emu::rms_norm_bf16(kernels::RmsNormArgs{x.data(), w.data(), nullptr, T, E, 1e-5f}, y16.data(),
                       nullptr);
    CHECK(test::rel_error(widen(y16), want) < 1.0 / 256);
  }
  {  // RoPE at large angles
    const uint32_t T = 7, H = 3, D = 64;
    std::vector<uint32_t> pos(T);
    for (uint32_t t = 0; t < T; ++t) pos[t] = 3000 + 7 * t;
    kernels::RopeTable table;
    build_rope_table(kernels::rope_inv_freq(D, 10000.0f, RopeScaling{}), pos.data(), T, &table);
    const auto x = test::random_vector(size_t(T) * H * D, 103, -2, 2);
    auto want = x, got = x;
    kernels::cpu::rope(nullptr,
                       kernels::RopeArgs{want.data(), table.cos.data(), table.sin.data(), T, H, D});
    emu::rope(kernels::RopeArgs{got.data(), table.cos.data(), table.sin.data(), T, H, D}, nullptr);
    CHECK(test::rel_error(got, want) < 1e-6);
  }
  {  // SwiGLU over a wide input range, fp32 and bf16
    const size_t n = 3000 + 3;
    const auto g = test::random_vector(n, 104, -30, 30);
    const auto u = test::random_vector(n, 105, -2, 2);
    std::vector<float> want(n), got(n, NAN);
    kernels::cpu::swiglu(nullptr, kernels::SwigluArgs{g.data(), u.data(), want.data(), n});
    emu::swiglu(kernels::SwigluArgs{g.data(), u.data(), got.data(), n}, nullptr);
    CHECK(test::rel_error(got, want) < 1e-5);
    std::vector<uint16_t> y16(n, 0xFFFF);
    emu::swiglu_bf16(kernels::SwigluArgs{g.data(), u.data(), nullptr, n}, y16.data(), nullptr);
    CHECK(test::rel_error(widen(y16), want) < 1.0 / 256);
  }
  {  // the ragged append: each head's rows where the CPU puts them
    const uint32_t T = 5, Hkv = 3, D = 64, rows = 200;
    const auto kn = test::random_vector(size_t(T) * Hkv * D, 106),
               vn = test::random_vector(size_t(T) * Hkv * D, 107);
    const auto k0 = test::random_vector(size_t(rows) * D, 108),
               v0 = test::random_vector(size_t(rows) * D, 109);
    const uint64_t dst[3] = {17, 90, 150};
    auto k = k0, v = v0, ek = k0, ev = v0;
    kernels::cpu::kv_append(
        kernels::KvAppendArgs{kn.data(), vn.data(), k.data(), v.data(), dst, T, Hkv, D});
    emu::kv_append(
        kernels::KvAppendArgs{kn.data(), vn.data(), ek.data(), ev.data(), dst, T, Hkv, D}, nullptr);
    CHECK(ek == k);
    CHECK(ev == v);
  }
  {  // the forward's helpers: embedding gather, residual add, bf16 cast (exact)
    const uint32_t V = 50, E = 96, T = 6;
    auto table = test::random_vector(size_t(V) * E, 113);
    const std::vector<uint16_t> table16 = to_bf16_host(table);
    const std::vector<int32_t> tokens = {3, 49, 0, 3, 17, 25};
    std::vector<float> x(size_t(T) * E, NAN);
    emu::embed_bf16(table16.data(), tokens.data(), x.data(), T, E, nullptr);
    for (uint32_t t = 0; t < T; ++t)
      for (uint32_t e = 0; e < E; ++e)
        REQUIRE(x[size_t(t) * E + e] == bf16_to_f32(table16[size_t(tokens[t]) * E + e]));
    const auto y = test::random_vector(x.size(), 114);
    auto sum = x;
    emu::add_in_place(sum.data(), y.data(), x.size(), nullptr);
    for (size_t i = 0; i < x.size(); ++i) REQUIRE(sum[i] == x[i] + y[i]);
    std::vector<uint16_t> b16(y.size(), 0xFFFF);
    emu::to_bf16(y.data(), b16.data(), y.size(), nullptr);
    CHECK(b16 == to_bf16_host(y));
  }
}
