// In-process A/B of the CPU attention kernel: variant A (kernels/cpu/attention.cc at a git
// revision) and variant B (the working tree's) are compiled into one program (bench/ab/variant.cc)
// and called alternately on the same inputs, pair after pair. On a shared or virtual machine the
// speed moves by 10-30% from one second to the next, which swamps a kernel change measured by two
// separate runs; the two calls of a pair, a few milliseconds apart, see the same machine, so the
// median of the pairs' ratios is the comparison (each variant's fastest call is shown beside it).
// It also says whether the two outputs are the same bits (a change meant to keep every sum's
// order). Built and run by attention_ab.sh.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/thread_pool.h"

namespace kvzip::kernels::cpu {
namespace va {
void attention_f32(ThreadPool* pool, const AttentionArgs& a, float* lse);
}
namespace vb {
void attention_f32(ThreadPool* pool, const AttentionArgs& a, float* lse);
}
}  // namespace kvzip::kernels::cpu

using namespace kvzip::kernels;

namespace {

struct Args {
  uint32_t T = 512, len = 2048, threads = 2, rounds = 20;
  uint32_t Hq = 9, Hkv = 3, D = 64;  // SmolLM2-135M
  bool bf16 = false;
};

[[noreturn]] void usage() {
  std::fprintf(stderr,
               "usage: attention_ab [--tokens T] [--len N] [--threads P] [--rounds R]\n"
               "                    [--heads HQ,HKV,D (default 9,3,64)] [--bf16 1]\n");
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) usage();
    const char* v = argv[++i];
    if (k == "--tokens") a.T = std::atoi(v);
    else if (k == "--len") a.len = std::atoi(v);
    else if (k == "--threads") a.threads = std::atoi(v);
    else if (k == "--rounds") a.rounds = std::atoi(v);
    else if (k == "--bf16") a.bf16 = std::atoi(v) != 0;
    else if (k == "--heads") {
      if (std::sscanf(v, "%u,%u,%u", &a.Hq, &a.Hkv, &a.D) != 3) usage();
    } else usage();
  }
  if (a.T == 0 || a.len < a.T || a.threads == 0 || a.rounds == 0 || a.Hkv == 0 ||
      a.Hq % a.Hkv != 0 || a.D == 0)
    usage();
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  const Args o = parse(argc, argv);
  std::mt19937 gen(1);
  std::normal_distribution<float> nd;
  auto fill = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = nd(gen);
    return v;
  };
  // Causal: the T queries are the span's last T rows (a prefill chunk at depth len - T).
  const std::vector<float> q = fill(size_t(o.T) * o.Hq * o.D),
                           k = fill(size_t(o.Hkv) * o.len * o.D),
                           v = fill(size_t(o.Hkv) * o.len * o.D);
  std::vector<float> out_a(q.size()), out_b(q.size());
  std::vector<KvSpan> spans(o.Hkv);
  for (uint32_t h = 0; h < o.Hkv; ++h)
    spans[h] =
        KvSpan{k.data() + size_t(h) * o.len * o.D, v.data() + size_t(h) * o.len * o.D, o.len};
  AttentionArgs a{q.data(), spans.data(), out_a.data(), o.T,
                  o.Hq,     o.Hkv,        o.D,          1.0f / std::sqrt(float(o.D))};
  // bf16 products run only in the 16-lane variants (AB_WIDE) on a CPU with AVX-512 BF16.
  const bool bf16 = o.bf16 && AB_WIDE && attention_bf16_available();
  if (o.bf16 && !bf16)
    std::fprintf(stderr,
                 "attention_ab: bf16 products need WIDE=1 and a CPU with AVX-512 BF16; fp32\n");
  a.bf16 = bf16;
  AttentionArgs b = a;
  b.out = out_b.data();
  ThreadPool pool(o.threads);
  using Clock = std::chrono::steady_clock;
  double ta = 1e30, tb = 1e30;
  auto timed = [&](auto fn, const AttentionArgs& args) {
    const auto t0 = Clock::now();
    fn(&pool, args, nullptr);
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  // Round 0 warms both up and is not counted; the order alternates (the second call of a pair
  // finds the caches as the first left them: 1-2% on a 0.5 ms call, measured A against A). The
  // ratio is the median over pairs of A's time over B's: a slow stretch of the machine slows both
  // calls of a pair, where the two minimums can come from different stretches (A against A, the
  // minimums' ratio strayed by up to 7% in 30 rounds on a noisy guest).
  std::vector<double> ratios;
  for (uint32_t r = 0; r <= 2 * o.rounds; ++r) {
    double da, db;
    if (r % 2 == 0) {
      da = timed(cpu::va::attention_f32, a);
      db = timed(cpu::vb::attention_f32, b);
    } else {
      db = timed(cpu::vb::attention_f32, b);
      da = timed(cpu::va::attention_f32, a);
    }
    if (r == 0) continue;
    ta = std::min(ta, da);
    tb = std::min(tb, db);
    ratios.push_back(da / db);
  }
  std::sort(ratios.begin(), ratios.end());
  const size_t n = ratios.size();
  const double median = n % 2 ? ratios[n / 2] : 0.5 * (ratios[n / 2 - 1] + ratios[n / 2]);
  const double pairs = double(o.T) * (o.len - o.T) + double(o.T) * (o.T + 1) / 2;
  const double flops = 4.0 * o.D * o.Hq * pairs;  // q·k and p·v, 2·D each per (query head, key)
  const bool same = std::memcmp(out_a.data(), out_b.data(), out_a.size() * sizeof(float)) == 0;
  std::printf(
      "T=%u len=%u heads=%u/%u D=%u threads=%u %s, %u pairs: best A %.3f ms (%.1f GFLOP/s), "
      "B %.3f ms (%.1f GFLOP/s); B/A speed %.3fx (median of pairs; [%.3f, %.3f] quartiles)  "
      "outputs %s\n",
      o.T, o.len, o.Hq, o.Hkv, o.D, o.threads, bf16 ? "bf16" : "fp32", unsigned(n), ta * 1e3,
      flops / ta * 1e-9, tb * 1e3, flops / tb * 1e-9, median, ratios[n / 4], ratios[3 * n / 4],
      same ? "the same bits" : "DIFFER");
  return 0;
}
