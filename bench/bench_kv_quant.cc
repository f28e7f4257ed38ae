// bench_kv_quant: one decode step of attention for one KV head (the 3 query heads of its GQA group,
// SmolLM2-135M: D = 64) over R cached rows, single thread, best of --reps: the f32 attention
// kernel (kernels/attention.h) against attention straight over q8/q4 rows (kv_quant_attend) and
// against dequantize-then-attend. Shows what attending in place costs before it is wired into
// decode; "q8r"/"q4r" rows are Hadamard-rotated (v1.3: the query and the output are rotated).
// Usage: bench_kv_quant [--rows R (5656)] [--reps N (50)]. Random rows; no checks here
// (tests/kernels/test_kv_quant.cc holds the correctness tests).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "kernels/attention.h"
#include "kernels/kv_quant.h"

using namespace kvzip;

namespace {

double best_us(uint32_t reps, const std::function<void()>& f) {
  double best = 1e30;
  for (uint32_t r = 0; r < reps; ++r) {
    const auto t = std::chrono::steady_clock::now();
    f();
    best = std::min(
        best,
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  uint32_t R = 5656, reps = 50;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rows")) R = static_cast<uint32_t>(std::atoi(argv[i + 1]));
    if (!std::strcmp(argv[i], "--reps")) reps = static_cast<uint32_t>(std::atoi(argv[i + 1]));
  }
  const uint32_t D = 64, n_q = 3;
  std::mt19937 gen(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> k(size_t(R) * D), v(k.size()), q(n_q * D), out(n_q * D),
      scores(size_t(n_q) * R);
  for (float& x : k) x = nd(gen);
  for (float& x : v) x = nd(gen);
  for (float& x : q) x = nd(gen);
  const float scale = 1.0f / 8.0f;

  // f32: the decode attention kernel, T = 1 query token whose row is the last of the span.
  kernels::KvSpan span{k.data(), v.data(), R};
  kernels::AttentionArgs a{q.data(), &span, out.data(), 1, n_q, 1, D, scale, nullptr};
  const double f32_us = best_us(reps, [&] { kernels::cpu::attention(nullptr, a); });
  std::printf("rows %u, D %u, %u query heads, 1 thread, best of %u\n", R, D, n_q, reps);
  std::printf("%-34s %9.1f us  (1.00x)\n", "f32 attention (kernels/attention)", f32_us);

  for (bool rotated : {false, true})
    for (uint32_t bits : {8u, 4u}) {
      const kernels::KvQuantLayout l{bits, D, D, rotated};  // rotated: Hadamard codes (v1.3)
      std::vector<float> kc(D), vc(D), deq_k(k.size()), deq_v(v.size());
      std::vector<uint16_t> kp(size_t(R) * l.param_words()), vp(kp.size());
      std::vector<uint8_t> kq(size_t(R) * l.code_bytes()), vq(kq.size());
      kernels::cpu::kv_quantize_rows(k.data(), {l, R, kc.data(), kp.data(), kq.data()});
      kernels::cpu::kv_quantize_rows(v.data(), {l, R, vc.data(), vp.data(), vq.data()});
      const kernels::KvQuantRows kr{l, R, kc.data(), kp.data(), kq.data()},
          vr{l, R, vc.data(), vp.data(), vq.data()};
      const double direct = best_us(reps, [&] {
        kernels::cpu::kv_quant_attend(
            {q.data(), n_q, kr, vr, scale, scores.data(), out.data(), nullptr});
      });
      const double deq = best_us(reps, [&] {
        kernels::cpu::kv_dequantize_rows(kr, deq_k.data());
        kernels::cpu::kv_dequantize_rows(vr, deq_v.data());
        kernels::KvSpan s{deq_k.data(), deq_v.data(), R};
        kernels::AttentionArgs b{q.data(), &s, out.data(), 1, n_q, 1, D, scale, nullptr};
        kernels::cpu::attention(nullptr, b);
      });
      const char* r = rotated ? "r" : " ";
      std::printf("q%u%s attention over the codes         %9.1f us  (%.2fx)\n", bits, r, direct,
                  direct / f32_us);
      std::printf("q%u%s dequantize, then f32 attention   %9.1f us  (%.2fx)\n", bits, r, deq,
                  deq / f32_us);
    }
  return 0;
}
