// CUDA q8/q4 K/V kernels (kernels/cuda/kv_quant.cu) against the CPU ones on random rows, for
// every layout (f16 or byte parameters, rotated or not): dequantization bit for bit (the same
// c * fma(s, q, m) and Hadamard butterflies), attention logits within a summation bound. Skips
// without a CUDA build or device (tests/cuda/support.h).
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "kernels/kv_quant.h"
#include "tests/cuda/support.h"
#include "tests/support/random_weights.h"

using namespace kvzip;

TEST_CASE("CUDA kv_quant dequantize and scores match the CPU", "[cuda][sanitize]") {
  if (!test::gpu_ready()) return;
  const uint32_t bits = GENERATE(8u, 4u);
  const uint32_t group = GENERATE(64u, 32u, 4u);
  const bool rotated = GENERATE(false, true);
  const bool byte_params = GENERATE(false, true);
  const uint32_t D = GENERATE(64u, 128u), n_q = 3;
  const size_t R = 257;  // > 4 score blocks of 64 rows, the last one partial
  const kernels::KvQuantLayout l{bits, D, group, rotated, byte_params};
  INFO("q" << bits << " group " << group << " D " << D << (rotated ? " rotated" : "")
           << (byte_params ? " byte" : " f16"));
  std::vector<float> x = test::random_vector(R * D, test::seed(bits * 100 + group), -3.0f, 3.0f);
  for (size_t i = 0; i < x.size(); i += 7) x[i] *= 10.0f;  // outliers
  std::vector<float> c(D);
  std::vector<uint16_t> p(R * l.param_words());
  std::vector<uint8_t> codes(R * l.code_bytes());
  kernels::cpu::kv_quantize_rows(x.data(), {l, R, c.data(), p.data(), codes.data()});
  const kernels::KvQuantRows host{l, R, c.data(), p.data(), codes.data()};

  auto dc = test::to_gpu(c);
  auto dp = test::to_gpu(p);
  auto dcodes = test::to_gpu(codes);
  const kernels::KvQuantRows dev{l, R, dc.data(), dp.data(), dcodes.data()};
  const kernels::Exec gpu{kernels::Device::Cuda, nullptr, nullptr};

  std::vector<float> want(R * D);
  kernels::cpu::kv_dequantize_rows(host, want.data());
  auto out = test::poisoned(R * D);
  kernels::kv_dequantize_rows(gpu, dev, out.data());
  CHECK(out.download() == want);

  const std::vector<float> q = test::random_vector(n_q * D, test::seed(7), -1.0f, 1.0f);
  std::vector<float> s_cpu(n_q * R);
  kernels::cpu::kv_quant_scores(q.data(), n_q, host, 0.125f, s_cpu.data());
  auto dq = test::to_gpu(q);
  auto ds = test::poisoned(n_q * R);
  kernels::kv_quant_scores(gpu, dq.data(), n_q, dev, 0.125f, ds.data());
  const std::vector<float> s_gpu = ds.download();
  for (size_t i = 0; i < s_cpu.size(); ++i) {
    INFO("logit " << i << ": " << s_gpu[i] << " vs " << s_cpu[i]);
    REQUIRE(std::fabs(s_gpu[i] - s_cpu[i]) <= 1e-4f * (1.0f + std::fabs(s_cpu[i])));
  }
}
