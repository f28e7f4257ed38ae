// bench_kernels: CPU throughput of the runtime at SmolLM2-135M shapes (L=30, E=576, Hq=9, Hkv=3,
// D=64, F=1536, V=49152) on random weights: sgemm GFLOP/s per projection shape (plus a large square
// GEMM as the machine's practical peak), the decode GEMVs (fp32 and quantized, GB/s of weights
// read), attention, prefill tokens/s of a --ctx document and decode tokens/s at that context with
// the fp32 and the quantized GEMV (the model's matrices in Q4_1, its embedding in Q8_0, like the
// SmolLM2 GGUF). Usage: bench_kernels [--threads N] [--ctx T] [--decode N] [--attention-only 1].
// Each figure is the best of a few runs. Wall-clock rates are what a user sees; the "per cpu-s"
// rates divide by the process CPU time instead, which stays meaningful on a machine shared with
// other jobs (there wall time stretches, CPU time much less). No correctness checks here.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_shapes.h"
#include "cache/kv_cache.h"
#include "common/half.h"
#include "kernels/attention.h"
#include "kernels/gemm.h"
#include "kernels/qgemv.h"
#include "kernels/quant.h"
#include "kernels/thread_pool.h"
#include "model/forward.h"

using namespace kvzip;

namespace {

struct Args {
  uint32_t threads = 2;
  uint32_t ctx = 2048;
  uint32_t decode = 16;
  uint32_t attention_only =
      0;  // 1: only the attention rows (fp32 and, where the CPU has them, bf16)
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    uint32_t v = static_cast<uint32_t>(std::strtoul(argv[i + 1], nullptr, 10));
    if (k == "--threads") a.threads = v;
    else if (k == "--ctx") a.ctx = v;
    else if (k == "--decode") a.decode = v;
    else if (k == "--attention-only") a.attention_only = v;
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

// Round-to-nearest block quantization of an (rows, cols) fp32 matrix (cols % 32 == 0); `w` is
// replaced by the values the blocks decode to, so both GEMV paths compute the same product.
struct QuantMatrix {
  kernels::QFormat format;
  uint32_t rows, cols;
  std::vector<uint8_t> blocks;
  // The same blocks as a model Matrix (owned bytes).
  model::Matrix matrix() const {
    model::Matrix m;
    m.type = format == kernels::QFormat::Q8_0 ? kernels::quant::GgmlType::Q8_0
                                              : kernels::quant::GgmlType::Q4_1;
    m.rows = rows;
    m.cols = cols;
    auto bytes = std::make_shared<std::vector<uint8_t>>(blocks);
    m.data = bytes->data();
    m.owned = std::move(bytes);
    return m;
  }
};

QuantMatrix quantize(std::vector<float>& w, uint32_t rows, uint32_t cols, kernels::QFormat f) {
  QuantMatrix q;
  q.format = f;
  q.rows = rows;
  q.cols = cols;
  const size_t bb = kernels::qblock_bytes(f), nb = size_t(rows) * cols / 32;
  q.blocks.resize(nb * bb);
  auto half = [](uint8_t* p, float v) {
    const uint16_t h = f32_to_f16(v);
    p[0] = uint8_t(h), p[1] = uint8_t(h >> 8);
  };
  for (size_t b = 0; b < nb; ++b) {
    float* x = w.data() + b * 32;
    uint8_t* blk = q.blocks.data() + b * bb;
    float lo = x[0], hi = x[0], amax = 0.0f;
    for (int i = 0; i < 32; ++i)
      lo = std::min(lo, x[i]), hi = std::max(hi, x[i]), amax = std::max(amax, std::fabs(x[i]));
    if (f == kernels::QFormat::Q8_0) {
      const float d = f16_to_f32(f32_to_f16(amax / 127.0f));
      half(blk, d);
      for (int i = 0; i < 32; ++i) blk[2 + i] = uint8_t(int8_t(d > 0 ? std::lround(x[i] / d) : 0));
    } else {  // Q4_1
      const float d = f16_to_f32(f32_to_f16((hi - lo) / 15.0f));
      const float m = f16_to_f32(f32_to_f16(lo));
      half(blk, d);
      half(blk + 2, m);
      for (int i = 0; i < 16; ++i) {
        auto code = [&](float v) {
          return d > 0 ? std::clamp<long>(std::lround((v - m) / d), 0, 15) : 0;
        };
        blk[4 + i] = uint8_t(code(x[i]) | (code(x[i + 16]) << 4));
      }
    }
  }
  kernels::quant::dequantize_rows(
      f == kernels::QFormat::Q8_0 ? kernels::quant::GgmlType::Q8_0 : kernels::quant::GgmlType::Q4_1,
      q.blocks.data(), w.data(), cols, rows, 1);
  return q;
}

// The model's matrices in Q4_1 and its embedding in Q8_0, like the SmolLM2 GGUF.
model::Weights random_model(const ModelConfig& c) {
  const uint32_t E = c.d_model, F = c.d_ffn, qd = c.n_heads * c.head_dim,
                 kvd = c.n_kv_heads * c.head_dim;
  uint64_t seed = 1;
  auto mat = [&](uint32_t out, uint32_t in, kernels::QFormat f = kernels::QFormat::Q4_1) {
    std::vector<float> w = fill(size_t(out) * in, ++seed, 1.0f / std::sqrt(float(in)));
    return quantize(w, out, in, f).matrix();
  };
  model::Weights w;
  w.config = c;
  w.tok_embd = mat(c.vocab_size, E, kernels::QFormat::Q8_0);
  w.output_norm = std::vector<float>(E, 1.0f);
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    model::LayerWeights lw;
    lw.attn_norm = std::vector<float>(E, 1.0f);
    lw.ffn_norm = std::vector<float>(E, 1.0f);
    lw.wq = mat(qd, E);
    lw.wk = mat(kvd, E);
    lw.wv = mat(kvd, E);
    lw.wo = mat(E, qd);
    lw.w_gate = mat(F, E);
    lw.w_up = mat(F, E);
    lw.w_down = mat(E, F);
    w.layers.push_back(std::move(lw));
  }
  return w;
}

void bench_gemm(kernels::ThreadPool& pool, const char* name, uint32_t T, uint32_t in,
                uint32_t out) {
  auto x = fill(size_t(T) * in, 1, 1.0f), w = fill(size_t(out) * in, 2, 0.05f);
  std::vector<float> y(size_t(T) * out);
  kernels::GemmArgs a{x.data(), w.data(), nullptr, y.data(), T, in, out};
  kernels::Exec ex{kernels::Device::Cpu, &pool};
  gemm(ex, a);  // warm up
  Timing t = best_of(3, [&] { gemm(ex, a); });
  double flops = 2.0 * T * in * out;
  std::printf("  %-22s %5u x %5u x %5u  %8.2f ms  %7.1f GFLOP/s  %7.1f per cpu-s\n", name, T, in,
              out, t.wall * 1e3, flops / t.wall * 1e-9, flops / t.cpu * 1e-9);
}

void bench_qgemv(kernels::ThreadPool& pool, const char* name, kernels::QFormat f, uint32_t in,
                 uint32_t out, kernels::QIsa isa) {
  auto w = fill(size_t(out) * in, 2, 0.05f);
  const QuantMatrix q = quantize(w, out, in, f);
  auto x = fill(in, 1, 1.0f);
  std::vector<float> y(out);
  kernels::QGemvArgs a{f, q.blocks.data(), x.data(), nullptr, y.data(), in, out};
  std::span<const kernels::QGemvArgs> jobs(&a, 1);
  kernels::cpu::qgemv(&pool, jobs, isa);  // warm up
  const int reps = 20;
  Timing t = best_of(3, [&] {
    for (int r = 0; r < reps; ++r) kernels::cpu::qgemv(&pool, jobs, isa);
  });
  const double bytes = double(q.blocks.size());
  std::printf("  %-22s %-6s %-6s %5u x %5u  %8.3f ms  %7.1f GB/s   %7.1f per cpu-s\n", name,
              kernels::qformat_name(f), kernels::qisa_name(isa), in, out, t.wall / reps * 1e3,
              bytes * reps / t.wall * 1e-9, bytes * reps / t.cpu * 1e-9);
}

void bench_fp32_gemv(kernels::ThreadPool& pool, const char* name, uint32_t in, uint32_t out) {
  auto x = fill(in, 1, 1.0f), w = fill(size_t(out) * in, 2, 0.05f);
  std::vector<float> y(out);
  kernels::GemmArgs a{x.data(), w.data(), nullptr, y.data(), 1, in, out};
  kernels::Exec ex{kernels::Device::Cpu, &pool};
  gemm(ex, a);
  const int reps = 20;
  Timing t = best_of(3, [&] {
    for (int r = 0; r < reps; ++r) gemm(ex, a);
  });
  const double bytes = 4.0 * in * out;
  std::printf("  %-22s %-6s %-6s %5u x %5u  %8.3f ms  %7.1f GB/s   %7.1f per cpu-s\n", name, "F32",
              "vec", in, out, t.wall / reps * 1e3, bytes * reps / t.wall * 1e-9,
              bytes * reps / t.cpu * 1e-9);
}

void bench_attention(kernels::ThreadPool& pool, uint32_t T, uint32_t len, bool bf16 = false) {
  const uint32_t Hq = 9, Hkv = 3, D = 64;
  auto q = fill(size_t(T) * Hq * D, 3, 1.0f), k = fill(size_t(Hkv) * len * D, 4, 1.0f),
       v = fill(size_t(Hkv) * len * D, 5, 1.0f);
  std::vector<float> out(q.size());
  std::vector<kernels::KvSpan> spans(Hkv);
  for (uint32_t h = 0; h < Hkv; ++h)
    spans[h] = kernels::KvSpan{k.data() + size_t(h) * len * D, v.data() + size_t(h) * len * D, len};
  kernels::AttentionArgs a{q.data(), spans.data(), out.data(), T, Hq, Hkv, D, 0.125f};
  a.bf16 = bf16;
  kernels::Exec ex{kernels::Device::Cpu, &pool};
  attention(ex, a);
  Timing t = best_of(3, [&] { attention(ex, a); });
  // Causal work: each of T queries sees (len - T + i + 1) keys; QK^T and PV are 2·D flops each.
  double pairs = double(T) * (len - T) + double(T) * (T + 1) / 2;
  double flops = 4.0 * D * Hq * pairs;
  std::printf("  attention T=%-5u len=%-6u %-4s       %8.2f ms  %7.1f GFLOP/s  %7.1f per cpu-s\n",
              T, len, bf16 ? "bf16" : "fp32", t.wall * 1e3, flops / t.wall * 1e-9,
              flops / t.cpu * 1e-9);
}

void attention_rows(kernels::ThreadPool& pool, const Args& args) {
  std::printf("\nAttention (Hq=9, Hkv=3, D=64)\n");
  bench_attention(pool, 512, 512);
  bench_attention(pool, 512, args.ctx);
  bench_attention(pool, 1, args.ctx);
  if (kernels::attention_bf16_available()) {  // the document prefill's and KVzip scoring's products
    bench_attention(pool, 512, 512, true);
    bench_attention(pool, 512, args.ctx, true);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Args args = parse(argc, argv);
  kernels::ThreadPool pool(args.threads);
  kernels::set_blas_threads(args.threads);
  std::printf("bench_kernels: %u threads, SmolLM2-135M shapes, random fp32 weights\n\n",
              args.threads);
  if (args.attention_only) {
    attention_rows(pool, args);
    return 0;
  }

  std::printf("GEMM (Y = X W^T)\n");
  bench_gemm(pool, "square (peak ref)", 2048, 2048, 2048);
  bench_gemm(pool, "q/o proj", 512, 576, 576);
  bench_gemm(pool, "k/v proj", 512, 576, 192);
  bench_gemm(pool, "gate/up", 512, 576, 1536);
  bench_gemm(pool, "down", 512, 1536, 576);

  std::printf("\nDecode GEMV (y = W x), weight bytes read per second\n");
  bench_fp32_gemv(pool, "gate", 576, 1536);
  bench_fp32_gemv(pool, "lm head", 576, 49152);
  for (kernels::QIsa isa : {kernels::QIsa::Scalar, kernels::QIsa::Avx2, kernels::QIsa::Avx512}) {
    if (!kernels::qisa_available(isa)) continue;
    bench_qgemv(pool, "gate", kernels::QFormat::Q4_1, 576, 1536, isa);
    bench_qgemv(pool, "down", kernels::QFormat::Q4_1, 1536, 576, isa);
    bench_qgemv(pool, "lm head", kernels::QFormat::Q8_0, 576, 49152, isa);
  }

  attention_rows(pool, args);

  ModelConfig cfg = bench::smollm2_135m_config();
  model::Weights w = random_model(cfg);
  model::ForwardOptions fp32_opt{args.threads, 512, {}}, q_opt = fp32_opt;
  fp32_opt.matmul = kernels::MatmulPath::Exact;
  model::Forward fwd(w, fp32_opt), fwd_q(w, q_opt);
  std::vector<int32_t> doc(args.ctx);
  for (uint32_t i = 0; i < args.ctx; ++i)
    doc[i] = static_cast<int32_t>((i * 7919u) % cfg.vocab_size);
  model::KvCache cache(cfg, args.ctx + args.decode);
  Timing t_prefill = best_of(2, [&] {
    cache.rollback(0);
    fwd.prefill(cache, doc, model::LogitsMode::Last);
  });
  auto decode_run = [&](model::Forward& f) {
    return best_of(2, [&] {
      cache.rollback(args.ctx);
      for (uint32_t i = 0; i < args.decode; ++i) f.decode(cache, static_cast<int32_t>(i));
    });
  };
  Timing t_decode = decode_run(fwd), t_decode_q = decode_run(fwd_q);
  double params = 0;
  for (const auto& l : w.layers)
    for (const model::Matrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
      params += double(m->rows) * m->cols;
  double attn_pairs = double(args.ctx) * (args.ctx + 1) / 2;
  double prefill_flops =
      2.0 * params * args.ctx + 4.0 * 64 * 9 * 30 * attn_pairs + 2.0 * cfg.vocab_size * cfg.d_model;
  std::printf("\nModel (L=30, E=576, Hq=9, Hkv=3, D=64, F=1536, V=49152)\n");
  std::printf(
      "  prefill %u tokens       %8.2f s      %7.1f tokens/s  %7.1f GFLOP/s  %7.1f GFLOP per "
      "cpu-s\n",
      args.ctx, t_prefill.wall, args.ctx / t_prefill.wall, prefill_flops / t_prefill.wall * 1e-9,
      prefill_flops / t_prefill.cpu * 1e-9);
  for (const auto& [name, t] :
       {std::pair{"exact path", t_decode}, std::pair{"fast path ", t_decode_q}})
    std::printf("  decode at %u context, %s  %8.2f ms/tok %7.1f tokens/s  (%.1f ms cpu/token)\n",
                args.ctx, name, t.wall / args.decode * 1e3, args.decode / t.wall,
                t.cpu / args.decode * 1e3);
  return 0;
}
