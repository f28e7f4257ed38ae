// bench_matmul: kernels/matmul over every stored weight type at one 8B-model projection shape
// (default 4096 x 4096), against the fp32 baseline measured in the same run (OpenBLAS sgemm for
// prefill, the fp32 weights through the same GEMV for decode). Decode (T = 1) reports the weight
// bytes streamed per second on both paths; prefill (T = --tokens) reports GFLOP/s and the ratio to
// fp32 sgemm on already-fp32 weights. Block contents are random (speed does not depend on them).
// --sweep TYPE instead times, for T = 1..512, the 8-bit-activation kernels (kernels/qdot.h, called
// directly, and the ISA's register tiles alone) against the Exact path (dequantized tiles or
// slabs + sgemm) and fp32 sgemm on fp32 weights: where qdot stops paying is where matmul's Fast
// path hands over to the slabs.
// Usage: bench_matmul [--threads N] [--in N] [--out N] [--tokens T] [--sweep Q4_0|Q4_1|...]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "bench/random_weights.h"
#include "kernels/detail/qdot_rows.h"
#include "kernels/gemm.h"
#include "kernels/matmul.h"
#include "kernels/qdot.h"
#include "kernels/quant.h"
#include "kernels/thread_pool.h"

using namespace kvzip;
using bench::random_blocks;
using bench::type_by_name;
using kernels::quant::GgmlType;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double best_of(int n, const std::function<void()>& fn) {
  double best = 1e30;
  for (int i = 0; i < n; ++i) {
    const double t0 = now();
    fn();
    best = std::min(best, now() - t0);
  }
  return best;
}

int sweep_t(const kernels::Exec& ex, const std::string& name, uint32_t in, uint32_t out,
            uint32_t threads) {
  const GgmlType t = type_by_name(name);
  const std::vector<uint8_t> w = random_blocks(t, out, in),
                             f32 = random_blocks(GgmlType::F32, out, in);
  const kernels::MatrixView v{t, w.data(), kernels::quant::row_bytes(t, in), out, in, nullptr};
  std::printf("%s %u x %u, %u threads, %s kernels; ms per call (GFLOP/s)\n", name.c_str(), out, in,
              threads, kernels::qisa_name(kernels::qisa_best()));
  // The register tiles of the best ISA alone (below the GEMM thresholds qdot runs them; from there
  // its GEMM): where the two cross is where kQdotAvx2GemmMinT / kQdotGemmMinT belong. The same
  // bits either way, so the choice is speed only.
  const kernels::QIsa isa = kernels::qisa_best();
  const kernels::cpu::detail::QDotFn tiles =
      isa == kernels::QIsa::Scalar ? nullptr
      : isa == kernels::QIsa::Avx2 || isa == kernels::QIsa::Avx512
          ? kernels::cpu::detail::qdot_rows_avx2(t)
          : kernels::cpu::detail::qdot_rows_vnni(t);
  std::printf("%5s | %18s | %18s | %18s | %18s | %s\n", "T", "qdot (int8)", "register tiles",
              "exact (deq+fp32)", "fp32 sgemm", "qdot vs exact");
  for (uint32_t T : {1u, 2u, 4u, 8u, 12u, 16u, 24u, 32u, 48u, 64u, 96u, 128u, 256u, 512u}) {
    std::vector<float> x(size_t(T) * in), y(size_t(T) * out);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.01f * float(i));
    const kernels::MatmulArgs a{x.data(), v, nullptr, y.data(), T};
    const int reps = T <= 8 ? 10 : 2;
    auto per_call = [&](const std::function<void()>& fn) {
      fn();
      return best_of(3,
                     [&] {
                       for (int r = 0; r < reps; ++r) fn();
                     }) /
             reps;
    };
    const double q = per_call([&] {
      kernels::cpu::qdot(ex.pool, std::span<const kernels::MatmulArgs>(&a, 1),
                         kernels::qisa_best());
    });
    // As qdot runs them: x quantized once, 32-row tasks over the pool.
    std::vector<kernels::Q8Act> acts(size_t(T) * in / 32);
    const double tl = tiles ? per_call([&] {
      kernels::cpu::quantize_acts(x.data(), T, in, acts.data());
      ex.pool->run((out + 31) / 32, [&](size_t k) {
        const uint32_t r0 = uint32_t(k) * 32;
        tiles(kernels::cpu::detail::QDotRowsArgs{&v, acts.data(), T, y.data(), r0,
                                                 std::min(r0 + 32, out)});
      });
    })
                            : NAN;
    const double e = per_call([&] { matmul(ex, a, kernels::MatmulPath::Exact); });
    const double g = per_call([&] {
      gemm(ex, kernels::GemmArgs{x.data(), reinterpret_cast<const float*>(f32.data()), nullptr,
                                 y.data(), T, in, out});
    });
    const double fl = 2.0 * T * in * out * 1e-9;
    std::printf("%5u | %8.3f (%6.1f) | %8.3f (%6.1f) | %8.3f (%6.1f) | %8.3f (%6.1f) | %.2fx\n", T,
                q * 1e3, fl / q, tl * 1e3, fl / tl, e * 1e3, fl / e, g * 1e3, fl / g, e / q);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  uint32_t threads = 2, in = 4096, out = 4096, T = 512;
  std::string sweep;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--sweep") {
      sweep = argv[i + 1];
      continue;
    }
    const uint32_t v = uint32_t(std::strtoul(argv[i + 1], nullptr, 10));
    if (k == "--threads") threads = v;
    else if (k == "--in") in = v;
    else if (k == "--out") out = v;
    else if (k == "--tokens") T = v;
    else std::fprintf(stderr, "ignoring unknown option %s\n", k.c_str());
  }
  kernels::ThreadPool pool(threads);
  kernels::set_blas_threads(threads);
  kernels::Exec ex{kernels::Device::Cpu, &pool};
  std::vector<float> x(size_t(T) * in), y(size_t(T) * out);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.01f * float(i));

  if (!sweep.empty()) return sweep_t(ex, sweep, in, out, threads);

  // Baseline: fp32 weights, OpenBLAS sgemm (prefill) and the same fp32 GEMV decode uses.
  const std::vector<uint8_t> f32 = random_blocks(GgmlType::F32, out, in);
  const float* wf = reinterpret_cast<const float*>(f32.data());
  const double sgemm_s = best_of(3, [&] {
    gemm(ex, kernels::GemmArgs{x.data(), wf, nullptr, y.data(), T, in, out});
  });
  const double flops = 2.0 * T * in * out;
  std::printf("matmul %u x %u, %u threads; prefill T=%u; fp32 sgemm baseline %.1f GFLOP/s\n", out,
              in, threads, T, flops / sgemm_s * 1e-9);
  std::printf("%-6s %9s | %12s %12s | %12s %12s %8s\n", "type", "MB", "decode fast", "decode exact",
              "prefill", "GFLOP/s", "vs sgemm");
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
                     GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q4_K, GgmlType::Q5_K,
                     GgmlType::Q6_K}) {
    if (in % kernels::quant::traits(t).block_elems != 0) {  // e.g. SmolLM2's 576 and the K-quants
      std::printf("%-6s (a row of %u is not a whole number of %u-element blocks)\n",
                  kernels::quant::type_name(t), in,
                  unsigned(kernels::quant::traits(t).block_elems));
      continue;
    }
    const std::vector<uint8_t> w = random_blocks(t, out, in);
    const kernels::MatrixView v{t, w.data(), kernels::quant::row_bytes(t, in), out, in, nullptr};
    auto decode = [&](kernels::MatmulPath p) {
      const int reps = 10;
      matmul(ex, kernels::MatmulArgs{x.data(), v, nullptr, y.data(), 1}, p);
      return best_of(3,
                     [&] {
                       for (int r = 0; r < reps; ++r)
                         matmul(ex, kernels::MatmulArgs{x.data(), v, nullptr, y.data(), 1}, p);
                     }) /
             reps;
    };
    const double d_fast = decode(kernels::MatmulPath::Fast),
                 d_exact = decode(kernels::MatmulPath::Exact);
    const double p_s = best_of(2, [&] {
      matmul(ex, kernels::MatmulArgs{x.data(), v, nullptr, y.data(), T});
    });
    const double gb = double(w.size()) / 1e9;
    std::printf("%-6s %9.1f | %7.2f GB/s %7.2f GB/s | %9.1f ms %12.1f %7.2fx\n",
                kernels::quant::type_name(t), double(w.size()) / 1e6, gb / d_fast, gb / d_exact,
                p_s * 1e3, flops / p_s * 1e-9, sgemm_s / p_s);
  }
  return 0;
}
