// kernels/qdot: the activation quantizer's rounding, and every ISA's row kernel (scalar reference,
// AVX2 tiles, VNNI tiles and GEMM where the CPU has them: all the same bits, whatever T) against a
// float64 product of the dequantized weights with the
// dequantized int8 activations — the value the integer arithmetic computes exactly, so the only
// slack is fp32 rounding of the scales and of the accumulation (1e-5 of Σ|w·x|). Every supported
// type, T from decode to past the 32-token block, with and without row map and bias.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "common/error.h"
#include "kernels/detail/decode_pick.h"
#include "kernels/detail/qdot_rows.h"
#include "kernels/qdot.h"
#include "kernels/quant.h"
#include "kernels/thread_pool.h"
#include "tests/support/random_weights.h"
#include "tests/support/thrown.h"
#include "tests/support/tiny_gguf.h"

namespace kvzip {
namespace {

using kernels::quant::GgmlType;

TEST_CASE("activations quantize to int8 within half a step of the block's scale",
          "[kernels][qdot]") {
  const uint32_t in = 96, T = 3;
  std::vector<float> x = test::random_vector(size_t(T) * in, 21, -3.0f, 3.0f);
  for (uint32_t e = 32; e < 64; ++e) x[e] = 0.0f;  // an all-zero block
  x[100] = 1e-30f;                                 // a tiny value in a normal block
  std::vector<kernels::Q8Act> q(size_t(T) * in / 32);
  kernels::cpu::quantize_acts(x.data(), T, in, q.data());
  for (size_t k = 0; k < q.size(); ++k) {
    float amax = 0.0f;
    int32_t sum = 0;
    for (int e = 0; e < 32; ++e) amax = std::max(amax, std::fabs(x[k * 32 + e]));
    CHECK(q[k].d == amax / 127.0f);
    for (int e = 0; e < 32; ++e) {
      CHECK(std::abs(int(q[k].q[e])) <= 127);
      CHECK(std::fabs(x[k * 32 + e] - q[k].d * q[k].q[e]) <= 0.5001f * q[k].d);
      sum += q[k].q[e];
    }
    CHECK(q[k].s == q[k].d * float(sum));
  }
  CHECK(q[1].d == 0.0f);
  CHECK(q[1].s == 0.0f);
}

TEST_CASE("the vector activation quantizer gives the portable one's bytes", "[kernels][qdot]") {
  const uint32_t in = 128, T = 9;
  std::vector<float> x = test::random_vector(size_t(T) * in, 22, -4.0f, 4.0f);
  for (uint32_t e = 0; e < 32; ++e) x[e] = 0.0f;  // all-zero block
  // Ties: amax 127 makes d = 1, so x = k + 0.5 must round to even, as nearbyint does.
  x[32] = 127.0f;
  for (uint32_t e = 33; e < 64; ++e) x[e] = float(int(e) - 48) + 0.5f;
  x[200] = -1e-30f, x[300] = 3e38f, x[301] = -3e38f;  // tiny and huge values
  std::vector<kernels::Q8Act> a(size_t(T) * in / 32), b(a.size());
  kernels::cpu::quantize_acts(x.data(), T, in, a.data());
  kernels::cpu::quantize_acts_portable(x.data(), T, in, b.data());
  for (size_t k = 0; k < a.size(); ++k) {
    INFO("block " << k);
    CHECK(std::memcmp(&a[k], &b[k], sizeof(kernels::Q8Act)) == 0);
  }
}

TEST_CASE(
    "the GEMMs' activation pack: the layout of kernels/detail/qdot_rows.h, the same bytes from "
    "every packer",
    "[kernels][qdot]") {
  const uint32_t in = 96, T = 21;  // two 16-token vectors, the second with 11 padding lanes
  const std::vector<float> x = test::random_vector(size_t(T) * in, 31, -3.0f, 3.0f);
  std::vector<kernels::Q8Act> q(size_t(T) * in / 32);
  kernels::cpu::quantize_acts(x.data(), T, in, q.data());
  for (const kernels::cpu::detail::PackOpts o :
       {kernels::cpu::detail::PackOpts{}, kernels::cpu::detail::kSignedPack}) {
    INFO("offset128 " << o.offset128);
    const uint8_t flip = o.offset128 ? 0x80 : 0;
    kernels::cpu::detail::QActPack p;
    kernels::cpu::detail::pack_acts_portable(q.data(), T, in, p, o);
    REQUIRE(p.nv == 2);
    REQUIRE(p.u.size() == size_t(2) * in * 16);
    // u (nv, in / 4, 16, 4): token 16v + l, element 4k + e at ((v · in/4 + k) · 16 + l) · 4 + e.
    for (uint32_t v = 0; v < 2; ++v)
      for (uint32_t k = 0; k < in / 4; ++k)
        for (uint32_t l = 0; l < 16; ++l)
          for (uint32_t e = 0; e < 4; ++e) {
            const uint32_t t = 16 * v + l, el = 4 * k + e;
            const uint8_t want =
                t < T ? uint8_t(q[size_t(t) * (in / 32) + el / 32].q[el % 32]) ^ flip : flip;
            CHECK(p.u[((size_t(v) * (in / 4) + k) * 16 + l) * 4 + e] == want);
          }
    for (uint32_t v = 0; v < 2; ++v)
      for (uint32_t g = 0; g < in / 32; ++g)
        for (uint32_t l = 0; l < 16; ++l) {
          const uint32_t t = 16 * v + l;
          CHECK(p.d[(size_t(v) * (in / 32) + g) * 16 + l] ==
                (t < T ? q[size_t(t) * (in / 32) + g].d : 0.0f));
          CHECK(p.s[(size_t(v) * (in / 32) + g) * 16 + l] ==
                (t < T ? q[size_t(t) * (in / 32) + g].s : 0.0f));
        }
    if (!kernels::cpu::detail::cpu_has_avx512_vnni()) {
      WARN("AVX-512 VNNI is not available on this CPU/build: its pack is not compared here");
      continue;
    }
    kernels::cpu::detail::QActPack pv;
    kernels::cpu::detail::pack_acts_vnni(q.data(), T, in, pv, o);
    CHECK(pv.nv == p.nv);
    CHECK(pv.u == p.u);
    CHECK(std::memcmp(pv.d.data(), p.d.data(), p.d.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(pv.s.data(), p.s.data(), p.s.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("k4_scale_words unpacks the eight 6-bit scales and mins scale_min_k4 reads",
          "[kernels][qdot]") {
  // Random 12-byte scale fields plus the corner bytes (all ones, all zeros, each top-two-bits
  // pattern): every group's byte in both words must be the (scale, min) the scalar decoder gives.
  std::mt19937 rng(77);
  std::vector<std::array<uint8_t, 12>> fields(4000);
  for (auto& f : fields)
    for (auto& b : f) b = static_cast<uint8_t>(rng());
  fields.push_back({});
  fields.back().fill(0xff);
  fields.push_back({});
  for (uint8_t top : {0x40, 0x80, 0xc0}) {
    fields.push_back({});
    fields.back().fill(top);
  }
  size_t mismatches = 0;
  for (const auto& f : fields) {
    uint64_t sc = 0, mn = 0;
    kernels::cpu::detail::k4_scale_words(f.data(), sc, mn);
    for (int g = 0; g < 8; ++g) {
      int s = 0, m = 0;
      kernels::quant::detail::scale_min_k4(g, f.data(), s, m);
      mismatches += int((sc >> (8 * g)) & 0xff) != s;
      mismatches += int((mn >> (8 * g)) & 0xff) != m;
    }
  }
  CHECK(mismatches == 0);
}

TEST_CASE("qdot kernels equal a float64 product of the dequantized weights and activations",
          "[kernels][qdot]") {
  const GgmlType type = GENERATE(GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                                 GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K);
  // Every tile shape: 1 (8 rows), 2 (4 x 2), 3 and 4 (2 x T), 5-7 (one row), 8 (1 x 8); 37, 49,
  // 77 and 130 end their 32-token blocks on each remainder shape. T >= kQdotGemmMinT runs the
  // AVX-512 VNNI GEMM where the CPU has it, T >= kQdotAvx2GemmMinT = 16 the AVX2 GEMM under
  // QIsa::Avx2: 37, 49 and 77 are not whole 16-token vectors (the AVX2 GEMM's second 8-token
  // half is partly or wholly padding) or 3-vector tiles, 130 spans several tiles. Under QIsa::Amx,
  // 12 still runs the VNNI GEMM and from kQdotAmxMinT = 16 the tile GEMM: 16 is one whole 16-token
  // pass, 37-261 end in a partial one, and 70 rows end in a 6-row panel (one live row tile of two);
  // Q6_K takes the tile GEMM from kQdotAmxMinTQ6K = 256 tokens, which 261 passes (not a whole
  // vector).
  const uint32_t T = GENERATE(1u, 2u, 3u, 4u, 5u, 6u, 7u, 8u, 12u, 16u, 37u, 49u, 77u, 130u, 261u);
  const bool mapped = GENERATE(false, true);
  // 70: not a multiple of the 4-row and 32-row tiles; 768 columns: one 512-column chunk of the
  // GEMM and a partial one.
  const uint32_t rows = 70, cols = 768;
  REQUIRE(kernels::qdot_supported(type));
  const std::vector<uint8_t> w = test::random_matrix(type, rows, cols, 5);
  std::vector<uint32_t> map(rows);
  std::iota(map.begin(), map.end(), 0u);
  for (uint32_t r = 0; r + 2 < rows; r += 3) std::swap(map[r], map[r + 2]);
  const kernels::MatrixView view{type, w.data(), kernels::quant::row_bytes(type, cols),
                                 rows, cols,     mapped ? map.data() : nullptr};
  const std::vector<float> x = test::random_vector(size_t(T) * cols, 8, -2.0f, 2.0f);
  const std::vector<float> bias = test::random_vector(rows, 9);

  // The oracle: dequantized weights (the same fp32 values the exact path uses) times d·q.
  std::vector<kernels::Q8Act> q(size_t(T) * cols / 32);
  kernels::cpu::quantize_acts(x.data(), T, cols, q.data());
  std::vector<double> want(size_t(T) * rows), mag(size_t(T) * rows);
  std::vector<float> row(cols);
  for (uint32_t r = 0; r < rows; ++r) {
    kernels::quant::dequantize_row(
        type, w.data() + size_t(view.row_map ? map[r] : r) * view.row_bytes, row.data(), cols);
    for (uint32_t t = 0; t < T; ++t) {
      double acc = bias[r], m = std::fabs(bias[r]);
      for (uint32_t e = 0; e < cols; ++e) {
        const kernels::Q8Act& a = q[size_t(t) * cols / 32 + e / 32];
        const double xe = double(a.d) * a.q[e % 32];
        acc += double(row[e]) * xe;
        m += std::fabs(double(row[e]) * xe);
      }
      want[size_t(t) * rows + r] = acc, mag[size_t(t) * rows + r] = m;
    }
  }
  kernels::ThreadPool pool(2);
  // Every kernel runs the one chain of kernels/qdot.h: the scalar reference's bits on every ISA
  // (tiles below the GEMMs' thresholds, the AVX2, VNNI and AMX GEMMs from them), and each token's
  // row of a T-token call is the bits of that token alone (T = 1, the decode tiles) — what lets the
  // server batch any number of requests and still answer exactly as `kvzip query` does.
  std::vector<float> ref(size_t(T) * rows, NAN);
  {
    const kernels::MatmulArgs job{x.data(), view, bias.data(), ref.data(), T};
    kernels::cpu::qdot(&pool, std::span<const kernels::MatmulArgs>(&job, 1), kernels::QIsa::Scalar);
  }
  for (kernels::QIsa isa : {kernels::QIsa::Scalar, kernels::QIsa::Avx2, kernels::QIsa::Avx512Vnni,
                            kernels::QIsa::Amx}) {
    if (!kernels::qisa_available(isa)) {
      static bool said[8] = {};
      if (!said[int(isa)])
        WARN(kernels::qisa_name(isa)
             << " is not available on this CPU/build: its kernels are not tested here");
      said[int(isa)] = true;
      continue;
    }
    INFO(kernels::quant::type_name(type)
         << " T=" << T << (mapped ? " row map" : "") << " " << kernels::qisa_name(isa));
    std::vector<float> y(size_t(T) * rows, NAN);
    const kernels::MatmulArgs job{x.data(), view, bias.data(), y.data(), T};
    kernels::cpu::qdot(&pool, std::span<const kernels::MatmulArgs>(&job, 1), isa);
    CHECK(std::memcmp(y.data(), ref.data(), y.size() * sizeof(float)) == 0);
    // A one-token call on a VNNI CPU runs the sixteen- or the eight-row decode kernels, whichever
    // has been faster (kernels/detail/decode_pick.h): both, forced, and the timed choice.
    const bool vnni = isa == kernels::QIsa::Avx512Vnni || isa == kernels::QIsa::Amx;
    for (int decode_rows : vnni ? std::vector<int>{16, 8, 0} : std::vector<int>{0}) {
      kernels::cpu::detail::set_decode_rows(decode_rows);
      for (uint32_t t : {0u, T / 2, T - 1}) {
        INFO("token " << t << ", decode rows " << decode_rows);
        std::vector<float> y1(rows, NAN);
        const kernels::MatmulArgs one{x.data() + size_t(t) * cols, view, bias.data(), y1.data(), 1};
        kernels::cpu::qdot(&pool, std::span<const kernels::MatmulArgs>(&one, 1), isa);
        CHECK(std::memcmp(y1.data(), y.data() + size_t(t) * rows, rows * sizeof(float)) == 0);
      }
    }
    kernels::cpu::detail::set_decode_rows(0);
    double worst = 0.0;
    for (size_t i = 0; i < y.size(); ++i)
      worst = std::max(worst, std::fabs(y[i] - want[i]) / mag[i]);
    CHECK(worst <= 1e-5);
  }
}

TEST_CASE("qdot batches jobs of two types as it runs each alone, and refuses other types",
          "[kernels][qdot]") {
  // 2: register tiles; 40: under QIsa::Amx the Q4_0 job takes the AMX GEMM and the Q6_K job the
  // VNNI one (kQdotAmxMinTQ6K), each on its own pack of the one shared quantization.
  const uint32_t cols = 256, T = GENERATE(2u, 40u);
  const std::vector<uint8_t> a = test::random_matrix(GgmlType::Q4_0, 40, cols, 1);
  const std::vector<uint8_t> b = test::random_matrix(GgmlType::Q6_K, 24, cols, 2);
  const kernels::MatrixView va{
      GgmlType::Q4_0, a.data(), kernels::quant::row_bytes(GgmlType::Q4_0, cols), 40, cols, nullptr};
  const kernels::MatrixView vb{
      GgmlType::Q6_K, b.data(), kernels::quant::row_bytes(GgmlType::Q6_K, cols), 24, cols, nullptr};
  const std::vector<float> x = test::random_vector(size_t(T) * cols, 9);
  std::vector<float> ya(T * 40), yb(T * 24);
  kernels::ThreadPool pool(2);
  const kernels::MatmulArgs jobs[] = {{x.data(), va, nullptr, ya.data(), T},
                                      {x.data(), vb, nullptr, yb.data(), T}};
  kernels::cpu::qdot(&pool, jobs, kernels::qisa_best());  // one batch, one shared quantization of x
  const std::vector<float> ya_batch = ya, yb_batch = yb;
  kernels::cpu::qdot(&pool, std::span<const kernels::MatmulArgs>(&jobs[0], 1),
                     kernels::qisa_best());
  kernels::cpu::qdot(&pool, std::span<const kernels::MatmulArgs>(&jobs[1], 1),
                     kernels::qisa_best());
  CHECK(ya == ya_batch);
  CHECK(yb == yb_batch);

  CHECK_FALSE(kernels::qdot_supported(GgmlType::F16));
  CHECK_FALSE(kernels::qdot_supported(GgmlType::F32));
  kernels::MatmulArgs bad = jobs[0];
  bad.w.type = GgmlType::BF16;
  const Error e = test::error_from(
      [&] {
        kernels::cpu::qdot(&pool, std::span<const kernels::MatmulArgs>(&bad, 1),
                           kernels::QIsa::Scalar);
      },
      "expected an error");
  CHECK(e.code() == Errc::unsupported);
  CHECK_THAT(e.what(), Catch::Contains("BF16"));
}

TEST_CASE(
    "one-token decode kernels: odd block counts and rows past the last whole tile keep the bits",
    "[kernels][qdot]") {
  // The one-token kernels take two blocks a step (Q6_K a block's two halves): 25 (5) blocks leave
  // one; 45 rows leave five past the eight-row tiles (and thirteen past sixteen-row ones). Every
  // ISA and both decode kernels against the scalar reference, bit for bit.
  const GgmlType type = GENERATE(GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                                 GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K);
  const bool k = type == GgmlType::Q4_K || type == GgmlType::Q5_K || type == GgmlType::Q6_K;
  const uint32_t blocks = GENERATE(25u, 2u, 1u), rows = 45;
  const uint32_t cols = blocks * (k ? 256u : 32u) / (k && blocks == 25 ? 5 : 1);
  const std::vector<uint8_t> w = test::random_matrix(type, rows, cols, 11);
  const kernels::MatrixView view{type, w.data(), kernels::quant::row_bytes(type, cols),
                                 rows, cols,     nullptr};
  const std::vector<float> x = test::random_vector(cols, 12, -2.0f, 2.0f);
  kernels::ThreadPool pool(2);
  std::vector<float> ref(rows, NAN);
  const kernels::MatmulArgs job_ref{x.data(), view, nullptr, ref.data(), 1};
  kernels::cpu::qdot(&pool, std::span<const kernels::MatmulArgs>(&job_ref, 1),
                     kernels::QIsa::Scalar);
  for (kernels::QIsa isa : {kernels::QIsa::Avx2, kernels::QIsa::Avx512Vnni}) {
    if (!kernels::qisa_available(isa)) continue;  // said by the test above
    for (int decode_rows : {16, 8}) {
      kernels::cpu::detail::set_decode_rows(decode_rows);
      INFO(kernels::quant::type_name(type)
           << " cols " << cols << " " << kernels::qisa_name(isa) << " rows " << decode_rows);
      std::vector<float> y(rows, NAN);
      const kernels::MatmulArgs job{x.data(), view, nullptr, y.data(), 1};
      kernels::cpu::qdot(&pool, std::span<const kernels::MatmulArgs>(&job, 1), isa);
      CHECK(std::memcmp(y.data(), ref.data(), rows * sizeof(float)) == 0);
    }
  }
  kernels::cpu::detail::set_decode_rows(0);
}

TEST_CASE(
    "the decode kernel choice tries each kernel, keeps the faster and still samples the other",
    "[kernels][qdot]") {
  using kernels::cpu::detail::DecodePick;
  DecodePick p;
  const uint64_t qkv = 1000, down = 2000;  // two kinds of call, timed apart
  CHECK(p.next(qkv) == 0);
  p.record(qkv, 0, 2e-3);
  CHECK(p.next(qkv) == 1);
  p.record(qkv, 1, 1e-3);    // kernel 1 is the faster on this kind
  CHECK(p.next(down) == 0);  // a new kind starts over
  p.record(down, 0, 1e-3);
  CHECK(p.next(down) == 1);
  p.record(down, 1, 3e-3);  // and kernel 0 is the faster on that one
  int other = 0, zero = 0;
  for (uint32_t i = 0; i < 4 * DecodePick::kExplore; ++i) {
    const int v = p.next(qkv);
    other += v == 0;
    p.record(qkv, v, v == 0 ? 2e-3 : 1e-3);
    const int w = p.next(down);
    zero += w == 0;
    p.record(down, w, w == 0 ? 1e-3 : 3e-3);
  }
  CHECK(other == 4);  // one call in kExplore, per kind
  CHECK(zero == 4 * DecodePick::kExplore - 4);
  // The machine changes: kernel 1 now takes 4 ms on qkv. Its samples move its mean past kernel 0's.
  int calls = 0;
  while (p.next(qkv) == 1 && calls < 100) {
    p.record(qkv, 1, 4e-3);
    ++calls;
  }
  CHECK(calls < 8);
  CHECK(p.mean(qkv, 1) > p.mean(qkv, 0));
  CHECK(p.next(qkv) == 0);
  CHECK(
      test::throws_code([] { kernels::cpu::detail::set_decode_rows(12); }, Errc::invalid_argument));
}

}  // namespace
}  // namespace kvzip
