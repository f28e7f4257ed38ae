// [cuda] parity of the element-wise CUDA kernels with their CPU oracles on fresh random inputs:
// RMSNorm (fp32 and bf16 outputs), RoPE, SwiGLU, the ragged append, the bf16 GEMM (cuBLAS) and
// the forward's helpers. Tolerances: fp32 outputs 1e-5 relative (max-abs over max); bf16 outputs
// one bf16 rounding (2^-8 relative); the GEMM 1e-4 on bf16-rounded inputs (fp32 accumulation in
// another order). Every output buffer starts as NaN so an unwritten element fails.
#include <catch2/catch.hpp>

#include <cmath>

#include "common/half.h"
#include "tests/cuda/support.h"

#if KVZIP_HAVE_CUDA
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/kv_append.h"
#include "kernels/rms_norm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "tests/support/random_weights.h"
#include "tests/support/reference.h"

using namespace kvzip;
using test::gpu_ready;
using test::to_gpu;

namespace {

const kernels::Exec kGpu{kernels::Device::Cuda, nullptr, nullptr};

std::vector<float> bf16_round(const std::vector<float>& x) {
  std::vector<float> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = bf16_to_f32(f32_to_bf16(x[i]));
  return r;
}

std::vector<float> widen(const std::vector<uint16_t>& b) {
  std::vector<float> r(b.size());
  for (size_t i = 0; i < b.size(); ++i) r[i] = bf16_to_f32(b[i]);
  return r;
}

}  // namespace

TEST_CASE("cuda rms_norm matches the CPU kernel, in place and into bf16", "[cuda][sanitize]") {
  if (!gpu_ready()) return;
  const uint32_t T = 37, E = 576;  // SmolLM2's width; not a multiple of the block
  auto x = test::random_vector(size_t(T) * E, test::seed(101), -3, 3);
  auto w = test::random_vector(E, test::seed(102), 0.5f, 1.5f);
  std::vector<float> want(x.size());
  rms_norm(kernels::Exec{}, kernels::RmsNormArgs{x.data(), w.data(), want.data(), T, E, 1e-5f});
  auto dx = to_gpu(x), dw = to_gpu(w);
  rms_norm(kGpu, kernels::RmsNormArgs{dx.data(), dw.data(), dx.data(), T, E, 1e-5f});
  CHECK(test::rel_error(dx.download(), want) < 1e-5);

  dx.upload(x);
  kernels::gpu::GpuBuffer<uint16_t> y16(x.size());
  kernels::cuda::rms_norm_bf16(kernels::RmsNormArgs{dx.data(), dw.data(), nullptr, T, E, 1e-5f},
                               y16.data(), nullptr);
  CHECK(test::rel_error(widen(y16.download()), want) < 1.0 / 256);
}

TEST_CASE("cuda rope matches the CPU kernel for queries and keys", "[cuda][sanitize]") {
  if (!gpu_ready()) return;
  const uint32_t T = 45, H = 9, D = 64;
  std::vector<uint32_t> pos(T);
  for (uint32_t t = 0; t < T; ++t) pos[t] = 3000 + 7 * t;  // large angles
  kernels::RopeTable table;
  build_rope_table(kernels::rope_inv_freq(D, 10000.0f, RopeScaling{}), pos.data(), T, &table);
  auto x = test::random_vector(size_t(T) * H * D, test::seed(103), -2, 2);
  auto want = x;
  rope(kernels::Exec{},
       kernels::RopeArgs{want.data(), table.cos.data(), table.sin.data(), T, H, D});
  auto dx = to_gpu(x), dc = to_gpu(table.cos), ds = to_gpu(table.sin);
  rope(kGpu, kernels::RopeArgs{dx.data(), dc.data(), ds.data(), T, H, D});
  CHECK(test::rel_error(dx.download(), want) < 1e-6);
}

TEST_CASE("cuda swiglu matches the CPU kernel over a wide input range", "[cuda][sanitize]") {
  if (!gpu_ready()) return;
  const size_t n = 100000 + 3;
  auto g = test::random_vector(n, test::seed(104), -30, 30);
  auto u = test::random_vector(n, test::seed(105), -2, 2);
  std::vector<float> want(n);
  swiglu(kernels::Exec{}, kernels::SwigluArgs{g.data(), u.data(), want.data(), n});
  auto dg = to_gpu(g), du = to_gpu(u);
  auto dy = test::poisoned(n);
  swiglu(kGpu, kernels::SwigluArgs{dg.data(), du.data(), dy.data(), n});
  CHECK(test::rel_error(dy.download(), want) < 1e-5);
  kernels::gpu::GpuBuffer<uint16_t> y16(n);
  kernels::cuda::swiglu_bf16(kernels::SwigluArgs{dg.data(), du.data(), nullptr, n}, y16.data(),
                             nullptr);
  CHECK(test::rel_error(widen(y16.download()), want) < 1.0 / 256);
}

TEST_CASE("cuda kv_append writes each head's rows where the CPU append does", "[cuda][sanitize]") {
  if (!gpu_ready()) return;
  const uint32_t T = 5, Hkv = 3, D = 64, rows = 200;
  auto kn = test::random_vector(size_t(T) * Hkv * D, test::seed(106));
  auto vn = test::random_vector(size_t(T) * Hkv * D, test::seed(107));
  auto k0 = test::random_vector(size_t(rows) * D, test::seed(108));
  auto v0 = test::random_vector(size_t(rows) * D, test::seed(109));
  const uint64_t dst[3] = {17, 90, 150};  // ragged: each head's append room starts elsewhere
  auto k = k0, v = v0;
  kv_append(kernels::Exec{},
            kernels::KvAppendArgs{kn.data(), vn.data(), k.data(), v.data(), dst, T, Hkv, D});
  auto dkn = to_gpu(kn), dvn = to_gpu(vn), dk = to_gpu(k0), dv = to_gpu(v0);
  kv_append(kGpu,
            kernels::KvAppendArgs{dkn.data(), dvn.data(), dk.data(), dv.data(), dst, T, Hkv, D});
  CHECK(dk.download() == k);
  CHECK(dv.download() == v);
}

TEST_CASE("cuda bf16 GEMM matches the fp32 reference on bf16-rounded inputs", "[cuda]") {
  if (!gpu_ready()) return;
  for (uint32_t T : {1u, 7u, 130u}) {
    const uint32_t in = 576, out = 192 + 3;
    auto x = bf16_round(test::random_vector(size_t(T) * in, test::seed(110 + T), -2, 2));
    auto w = bf16_round(test::random_vector(size_t(out) * in, test::seed(111), -0.05f, 0.05f));
    auto b = test::random_vector(out, test::seed(112), -0.1f, 0.1f);
    std::vector<float> want(size_t(T) * out);
    ref::gemm(x.data(), w.data(), b.data(), want.data(), T, in, out);
    auto dx = to_gpu(kernels::gpu::to_bf16(x.data(), x.size())),
         dw = to_gpu(kernels::gpu::to_bf16(w.data(), w.size()));
    auto db = to_gpu(b);
    auto dy = test::poisoned(want.size());
    kernels::cuda::gemm_bf16(
        kernels::GemmBf16Args{dx.data(), dw.data(), db.data(), dy.data(), T, in, out}, nullptr);
    INFO("T = " << T);
    CHECK(test::rel_error(dy.download(), want) < 1e-4);
  }
}

TEST_CASE("cuda forward helpers: bf16 cast, residual add, embedding gather", "[cuda][sanitize]") {
  if (!gpu_ready()) return;
  const uint32_t V = 50, E = 96, T = 6;
  auto table = bf16_round(test::random_vector(size_t(V) * E, test::seed(113)));
  const std::vector<int32_t> tokens = {3, 49, 0, 3, 17, 25};
  auto dtable = to_gpu(kernels::gpu::to_bf16(table.data(), table.size()));
  auto dtok = to_gpu(tokens);
  auto dx = test::poisoned(size_t(T) * E);
  kernels::cuda::embed_bf16(dtable.data(), dtok.data(), dx.data(), T, E, nullptr);
  auto x = dx.download();
  for (uint32_t t = 0; t < T; ++t)
    for (uint32_t e = 0; e < E; ++e)
      REQUIRE(x[size_t(t) * E + e] == table[size_t(tokens[t]) * E + e]);

  auto y = test::random_vector(x.size(), test::seed(114));
  auto dy = to_gpu(y);
  kernels::cuda::add_in_place(dx.data(), dy.data(), x.size(), nullptr);
  auto sum = dx.download();
  for (size_t i = 0; i < x.size(); ++i) REQUIRE(sum[i] == x[i] + y[i]);

  kernels::gpu::GpuBuffer<uint16_t> b16(x.size());
  kernels::cuda::to_bf16(dy.data(), b16.data(), y.size(), nullptr);
  CHECK(b16.download() ==
        kernels::gpu::to_bf16(y.data(), y.size()));  // device and host round alike
}

#else

TEST_CASE("cuda element-wise kernels are skipped in a CPU-only build", "[cuda]") {
  CHECK_FALSE(kvzip::test::gpu_ready());
}

#endif
