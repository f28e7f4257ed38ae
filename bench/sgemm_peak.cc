// sgemm_peak — the machine's measured OpenBLAS sgemm throughput at SmolLM2-135M prefill shapes.
// Each shape is C(M,N) = A(M,K) · W(N,K)^T, row-major, with W laid out like a model weight
// (out_features, in_features); that is the transposed-B call a prefill makes per linear layer.
// Reports the best of `--reps` timed runs (after one warm-up) for 1 and 2 OpenBLAS threads, and
// the time-weighted GFLOP/s of one whole transformer layer's seven projections at M tokens.
// Standalone: only cblas.h; no kvzip code is exercised. Usage: sgemm_peak [--reps N] [--threads T].
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace {

struct Shape {
  const char* name;  // which projection(s) of the model use it
  int m;             // rows of A and C (tokens)
  int k;             // reduction dim (in_features)
  int n;             // columns of C (out_features)
  int per_layer;     // how many times one SmolLM2 layer runs it (0: not a layer shape)
};

struct Options {
  int reps = 5;
  int max_threads = 2;
};

double flops(const Shape& s) { return 2.0 * s.m * s.k * double(s.n); }

// Deterministic values in [-1, 1): timing must not depend on data, but denormals or NaNs would.
std::vector<float> filled(size_t count, uint32_t seed) {
  std::vector<float> v(count);
  for (auto& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = float(seed >> 8) / float(1u << 23) - 1.0f;
  }
  return v;
}

// Best seconds over opt.reps runs of one sgemm, after a warm-up run.
double best_seconds(const Shape& s, const Options& opt) {
  const std::vector<float> a = filled(size_t(s.m) * s.k, 1);  // (M, K)
  const std::vector<float> w = filled(size_t(s.n) * s.k, 2);  // (N, K)
  std::vector<float> c(size_t(s.m) * s.n);                    // (M, N)
  auto run = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s.m, s.n, s.k, 1.0f, a.data(), s.k,
                w.data(), s.k, 0.0f, c.data(), s.n);
  };
  run();
  double best = 1e30;
  for (int r = 0; r < opt.reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    const auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
  }
  return best;
}

std::vector<Shape> shapes() {
  std::vector<Shape> out;
  for (int m : {512, 2048}) {
    out.push_back({"attn_q/attn_output", m, 576, 576, 2});
    out.push_back({"attn_k/attn_v", m, 576, 192, 2});
    out.push_back({"ffn_gate/ffn_up", m, 576, 1536, 2});
    out.push_back({"ffn_down", m, 1536, 576, 1});
  }
  out.push_back({"square", 2048, 2048, 2048, 0});
  return out;
}

// Returns nothing (after printing why) on a bad command line.
std::optional<Options> parse(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (!std::strcmp(argv[i], "--reps") && has_value) {
      opt.reps = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--threads") && has_value) {
      opt.max_threads = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--reps N (default 5)] [--threads T (default 2)]\n", argv[0]);
      return std::nullopt;
    }
  }
  if (opt.reps < 1 || opt.max_threads < 1) {
    std::fprintf(stderr, "--reps and --threads must be >= 1 (got %d, %d)\n", opt.reps,
                 opt.max_threads);
    return std::nullopt;
  }
  return opt;
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<Options> parsed = parse(argc, argv);
  if (!parsed) return 2;
  const Options& opt = *parsed;
  std::printf("OpenBLAS: %s (core %s); best of %d reps\n", openblas_get_config(),
              openblas_get_corename(), opt.reps);
  std::printf("%-20s %5s %5s %5s %8s %10s %10s\n", "shape", "M", "K", "N", "threads", "ms",
              "GFLOP/s");
  for (int threads = 1; threads <= opt.max_threads; ++threads) {
    openblas_set_num_threads(threads);
    double layer_flops[2] = {0, 0}, layer_secs[2] = {0, 0};  // index 0: M=512, 1: M=2048
    for (const Shape& s : shapes()) {
      const double sec = best_seconds(s, opt);
      std::printf("%-20s %5d %5d %5d %8d %10.3f %10.1f\n", s.name, s.m, s.k, s.n, threads,
                  sec * 1e3, flops(s) / sec * 1e-9);
      const int slot = s.m == 512 ? 0 : 1;
      layer_flops[slot] += s.per_layer * flops(s);
      layer_secs[slot] += s.per_layer * sec;
    }
    for (int slot = 0; slot < 2; ++slot) {
      const int m = slot == 0 ? 512 : 2048;
      std::printf("%-20s %5d %5s %5s %8d %10.3f %10.1f\n", "one layer (7 proj)", m, "-", "-",
                  threads, layer_secs[slot] * 1e3, layer_flops[slot] / layer_secs[slot] * 1e-9);
    }
  }
  return 0;
}
