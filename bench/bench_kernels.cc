// bench_kernels: CPU throughput of the runtime at SmolLM2-135M shapes (L=30, E=576, Hq=9, Hkv=3,
// D=64, F=1536, V=49152) on random weights: sgemm GFLOP/s per projection shape (plus a large square
// GEMM as the machine's practical peak), attention, prefill tokens/s of a --ctx document and
// decode tokens/s at that context. Usage: bench_kernels [--threads N] [--ctx T] [--decode N].
// Each figure is the best of a few runs. Wall-clock rates are what a user sees; the "per cpu-s"
// rates divide by the process CPU time instead, which stays meaningful on a machine shared with
// other jobs (there wall time stretches, CPU time much less). No correctness checks here.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/gemm.h"
#include "kernels/thread_pool.h"
#include "model/forward.h"
#include "model/kv_cache.h"

using namespace kvzip;

namespace {

struct Args {
  uint32_t threads = 2;
  uint32_t ctx = 2048;
  uint32_t decode = 16;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    uint32_t v = static_cast<uint32_t>(std::strtoul(argv[i + 1], nullptr, 10));
    if (k == "--threads") a.threads = v;
    else if (k == "--ctx") a.ctx = v;
    else if (k == "--decode") a.decode = v;
    else std::fprintf(stderr, "ignoring unknown option %s\n", k.c_str());
  }
  return a;
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double cpu_now() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct Timing {
  double wall = 1e30;  // seconds, best run
  double cpu = 1e30;   // process CPU seconds, best run
};

Timing best_of(int reps, const std::function<void()>& fn) {
  Timing best;
  for (int r = 0; r < reps; ++r) {
    double w0 = now(), c0 = cpu_now();
    fn();
    best.wall = std::min(best.wall, now() - w0);
    best.cpu = std::min(best.cpu, cpu_now() - c0);
  }
  return best;
}

std::vector<float> fill(size_t n, uint64_t seed, float scale) {
  std::vector<float> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& x : v) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x = scale * (static_cast<float>(s >> 40) / 16777216.0f * 2.0f - 1.0f);
  }
  return v;
}

ModelConfig smollm2_135m() {
  ModelConfig c;
  c.arch = "llama";
  c.n_layers = 30;
  c.d_model = 576;
  c.n_heads = 9;
  c.n_kv_heads = 3;
  c.head_dim = 64;
  c.d_ffn = 1536;
  c.vocab_size = 49152;
  c.max_context = 8192;
  c.rope_base = 100000.0f;
  c.tied_embeddings = true;
  return c;
}

Weights random_model(const ModelConfig& c) {
  const size_t E = c.d_model, F = c.d_ffn, qd = size_t(c.n_heads) * c.head_dim,
               kvd = size_t(c.n_kv_heads) * c.head_dim;
  uint64_t seed = 1;
  Weights w;
  w.config = c;
  w.tok_embd = fill(size_t(c.vocab_size) * E, ++seed, 1.0f);
  w.output_norm = std::vector<float>(E, 1.0f);
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    LayerWeights lw;
    lw.attn_norm = std::vector<float>(E, 1.0f);
    lw.ffn_norm = std::vector<float>(E, 1.0f);
    lw.wq = fill(qd * E, ++seed, 1.0f / std::sqrt(float(E)));
    lw.wk = fill(kvd * E, ++seed, 1.0f / std::sqrt(float(E)));
    lw.wv = fill(kvd * E, ++seed, 1.0f / std::sqrt(float(E)));
    lw.wo = fill(E * qd, ++seed, 1.0f / std::sqrt(float(qd)));
    lw.w_gate = fill(F * E, ++seed, 1.0f / std::sqrt(float(E)));
    lw.w_up = fill(F * E, ++seed, 1.0f / std::sqrt(float(E)));
    lw.w_down = fill(E * F, ++seed, 1.0f / std::sqrt(float(F)));
    w.layers.push_back(std::move(lw));
  }
  return w;
}

void bench_gemm(ThreadPool& pool, const char* name, uint32_t T, uint32_t in, uint32_t out) {
  auto x = fill(size_t(T) * in, 1, 1.0f), w = fill(size_t(out) * in, 2, 0.05f);
  std::vector<float> y(size_t(T) * out);
  GemmArgs a{x.data(), w.data(), nullptr, y.data(), T, in, out};
  Exec ex{Device::Cpu, &pool};
  gemm(ex, a);  // warm up
  Timing t = best_of(3, [&] { gemm(ex, a); });
  double flops = 2.0 * T * in * out;
  std::printf("  %-22s %5u x %5u x %5u  %8.2f ms  %7.1f GFLOP/s  %7.1f per cpu-s\n", name, T, in,
              out, t.wall * 1e3, flops / t.wall * 1e-9, flops / t.cpu * 1e-9);
}

void bench_attention(ThreadPool& pool, uint32_t T, uint32_t len) {
  const uint32_t Hq = 9, Hkv = 3, D = 64;
  auto q = fill(size_t(T) * Hq * D, 3, 1.0f), k = fill(size_t(Hkv) * len * D, 4, 1.0f),
       v = fill(size_t(Hkv) * len * D, 5, 1.0f);
  std::vector<float> out(q.size());
  std::vector<KvSpan> spans(Hkv);
  for (uint32_t h = 0; h < Hkv; ++h)
    spans[h] = KvSpan{k.data() + size_t(h) * len * D, v.data() + size_t(h) * len * D, len};
  AttentionArgs a{q.data(), spans.data(), out.data(), T, Hq, Hkv, D, 0.125f};
  Exec ex{Device::Cpu, &pool};
  attention(ex, a);
  Timing t = best_of(3, [&] { attention(ex, a); });
  // Causal work: each of T queries sees (len - T + i + 1) keys; QK^T and PV are 2·D flops each.
  double pairs = double(T) * (len - T) + double(T) * (T + 1) / 2;
  double flops = 4.0 * D * Hq * pairs;
  std::printf("  attention T=%-5u len=%-6u            %8.2f ms  %7.1f GFLOP/s  %7.1f per cpu-s\n",
              T, len, t.wall * 1e3, flops / t.wall * 1e-9, flops / t.cpu * 1e-9);
}

}  // namespace

int main(int argc, char** argv) {
  Args args = parse(argc, argv);
  ThreadPool pool(args.threads);
  set_blas_threads(args.threads);
  std::printf("bench_kernels: %u threads, SmolLM2-135M shapes, random fp32 weights\n\n", args.threads);

  std::printf("GEMM (Y = X W^T)\n");
  bench_gemm(pool, "square (peak ref)", 2048, 2048, 2048);
  bench_gemm(pool, "q/o proj", 512, 576, 576);
  bench_gemm(pool, "k/v proj", 512, 576, 192);
  bench_gemm(pool, "gate/up", 512, 576, 1536);
  bench_gemm(pool, "down", 512, 1536, 576);
  bench_gemm(pool, "gemv gate (decode)", 1, 576, 1536);
  bench_gemm(pool, "gemv lm head (decode)", 1, 576, 49152);

  std::printf("\nAttention (Hq=9, Hkv=3, D=64)\n");
  bench_attention(pool, 512, 512);
  bench_attention(pool, 512, args.ctx);
  bench_attention(pool, 1, args.ctx);

  ModelConfig cfg = smollm2_135m();
  Weights w = random_model(cfg);
  Forward fwd(w, ForwardOptions{args.threads, 512, {}});
  std::vector<int32_t> doc(args.ctx);
  for (uint32_t i = 0; i < args.ctx; ++i) doc[i] = static_cast<int32_t>((i * 7919u) % cfg.vocab_size);
  KvCache cache(cfg, args.ctx + args.decode);
  Timing t_prefill = best_of(2, [&] {
    cache.rollback(0);
    fwd.prefill(cache, doc, LogitsMode::Last);
  });
  Timing t_decode = best_of(2, [&] {
    cache.rollback(args.ctx);
    for (uint32_t i = 0; i < args.decode; ++i) fwd.decode(cache, static_cast<int32_t>(i));
  });
  double params = 0;
  for (const auto& l : w.layers)
    params += double(l.wq.size() + l.wk.size() + l.wv.size() + l.wo.size() + l.w_gate.size() +
                     l.w_up.size() + l.w_down.size());
  double attn_pairs = double(args.ctx) * (args.ctx + 1) / 2;
  double prefill_flops = 2.0 * params * args.ctx + 4.0 * 64 * 9 * 30 * attn_pairs +
                         2.0 * cfg.vocab_size * cfg.d_model;
  std::printf("\nModel (L=30, E=576, Hq=9, Hkv=3, D=64, F=1536, V=49152)\n");
  std::printf("  prefill %u tokens       %8.2f s      %7.1f tokens/s  %7.1f GFLOP/s  %7.1f GFLOP per cpu-s\n",
              args.ctx, t_prefill.wall, args.ctx / t_prefill.wall, prefill_flops / t_prefill.wall * 1e-9,
              prefill_flops / t_prefill.cpu * 1e-9);
  std::printf("  decode at %u context    %8.2f ms/tok %7.1f tokens/s  (%.1f ms cpu/token)\n", args.ctx,
              t_decode.wall / args.decode * 1e3, args.decode / t_decode.wall,
              t_decode.cpu / args.decode * 1e3);
  return 0;
}
