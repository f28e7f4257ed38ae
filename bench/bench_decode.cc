// bench_decode: decode's weight streaming against the machine's read bandwidth, measured in the
// same run. The bandwidth is a plain streaming read (every pool thread sums 64-bit words of its
// share of a buffer far larger than the caches, --bw-mb MiB); the decode is one token (T = 1)
// through every projection of a model shape's layers (Llama-3.2-1B or Llama-3-8B: Q, K and V as
// one call, O, gate and up as one call, down, as the model's forward issues them), weights of
// random blocks, --mb MiB or more of them, so every pass streams them from DRAM.
// Kernels per type: "fast" (matmul's default path: what decode runs), "fast-mapped" (the same with
// Q's and K's rows through the rotary interleave map kvzip reads a GGUF's Q and K by), "avx2" (qdot
// with the AVX2 tiles, for comparison on an AVX-512 CPU: the same bits) and "exact" (fp32 on the
// dequantized weights). Rounds interleave the bandwidth and every kernel; the table gives each
// one's median and best GB/s over the rounds and the median as a fraction of the median bandwidth,
// by the wall clock and by CPU time (bytes / (the process's CPU seconds / threads): on a machine
// shared with other jobs the wall clock counts the time the threads were not running; CPU time
// counts only theirs, spinning included).
// --resident instead measures each kernel's compute ceiling: one thread, one 2048-column matrix
// of about 1 MiB (it stays in L2), timed in the thread's CPU time (so other processes on a busy
// machine do not count), as GB/s of weights: the rate a thread could stream at if memory kept up.
// --tokens T makes each step T tokens at once (a serving batch: every weight byte still read once a
// step, the products those of T tokens).
// --bandwidth-only 1 measures just the read bandwidth (one line: median and best GB/s over the
// rounds), the probe bench/run_decode_rounds.sh takes around each decode it times.
// Usage: bench_decode [--threads N] [--shape 1b|8b] [--mb MiB] [--bw-mb MiB] [--rounds R]
//                     [--types Q4_0,Q4_K,...] [--kernels fast,avx2,exact] [--resident 1]
//                     [--tokens T] [--bandwidth-only 1] [--pages 2m|4k]
// The weights and the probe's buffer sit in 2 MiB pages (as kvzip holds a model read into memory)
// unless --pages 4k.
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "bench/random_weights.h"
#include "kernels/matmul.h"
#include "kernels/qdot.h"
#include "kernels/quant.h"
#include "kernels/thread_pool.h"

using namespace kvzip;
using bench::type_by_name;
using kernels::quant::GgmlType;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double cpu_now(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}
double thread_cpu_now() { return cpu_now(CLOCK_THREAD_CPUTIME_ID); }
double process_cpu_now() { return cpu_now(CLOCK_PROCESS_CPUTIME_ID); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Memory in 2 MiB pages where the kernel grants them (as kvzip holds a model's weights read into
// memory, checkpoint/detail/mapped_file.cc), or in 4 KiB pages with --pages 4k. With 4 KiB pages
// every page of a stream costs a TLB miss: the read-bandwidth probe then reads less than a decode
// in 2 MiB pages can (llama.cpp's decode has measured up to 105% of such a probe).
bool g_huge_pages = true;
struct Arena {
  void* raw = MAP_FAILED;
  size_t len = 0;
  uint8_t* data = nullptr;
  explicit Arena(size_t bytes) {
    constexpr size_t kHuge = size_t(2) << 20;
    len = (bytes + kHuge - 1) / kHuge * kHuge + kHuge;
    raw = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) {
      std::perror("mmap");
      std::exit(1);
    }
    data = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(raw) + kHuge - 1) &
                                      ~uintptr_t(kHuge - 1));
    madvise(data, len - kHuge, g_huge_pages ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena() {
    if (raw != MAP_FAILED) munmap(raw, len);
  }
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// Sum of the 64-bit words in [p, p + n) (n a multiple of 128 bytes): four independent AVX2
// accumulators, so the loads, not the adds, set the pace.
__attribute__((target("avx2"))) uint64_t sum_words(const uint8_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < n; i += 128) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  alignas(32) uint64_t w[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(w),
                     _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
  return w[0] + w[1] + w[2] + w[3];
}

// One read of the whole buffer by every pool thread: chunks of 4 MiB handed out dynamically,
// as the kernels' row tasks are. Returns seconds.
// Wall and process CPU seconds of fn().
struct Times {
  double wall, cpu;
};
template <class Fn>
Times timed(Fn&& fn) {
  const double t0 = now(), c0 = process_cpu_now();
  fn();
  return {now() - t0, process_cpu_now() - c0};
}

void read_pass(kernels::ThreadPool& pool, const uint8_t* buf, size_t bytes, uint64_t& sink) {
  constexpr size_t kChunk = size_t(4) << 20;
  const size_t n = bytes / kChunk;
  std::vector<uint64_t> part(n);
  pool.run(n, [&](size_t i) { part[i] = sum_words(buf + i * kChunk, kChunk); });
  for (uint64_t v : part) sink += v;
}

struct Proj {
  uint32_t out, in;
  int call;  // projections with the same call index (within a layer) run as one matmul call
};

// One layer's projections and the layer count for `shape`.
std::vector<Proj> layer_shape(const std::string& shape, uint32_t& layers) {
  if (shape == "1b") {  // Llama-3.2-1B: E 2048, 32 x 64 query heads, 8 KV heads, FFN 8192
    layers = 16;
    return {{2048, 2048, 0}, {512, 2048, 0},  {512, 2048, 0}, {2048, 2048, 1},
            {8192, 2048, 2}, {8192, 2048, 2}, {2048, 8192, 3}};
  }
  if (shape == "8b") {  // Llama-3-8B: E 4096, 32 x 128 query heads, 8 KV heads, FFN 14336
    layers = 32;
    return {{4096, 4096, 0},  {1024, 4096, 0},  {1024, 4096, 0}, {4096, 4096, 1},
            {14336, 4096, 2}, {14336, 4096, 2}, {4096, 14336, 3}};
  }
  std::fprintf(stderr, "unknown --shape %s (1b or 8b)\n", shape.c_str());
  std::exit(2);
}

// Weights of `layers` layers of one type, and the calls one decode token makes over them.
struct DecodeSet {
  std::unique_ptr<Arena> arena;          // every projection's blocks, one after another
  std::vector<const uint8_t*> blocks;    // one per projection
  std::vector<std::vector<float>> x, y;  // one per projection
  std::vector<std::vector<kernels::MatmulArgs>> calls;
  // The same calls with Q's and K's rows through llama.cpp's rotary interleave map, as kvzip reads
  // a GGUF's Q and K (checkpoint/gguf_weights.cc): the "fast-mapped" kernel.
  std::vector<std::vector<kernels::MatmulArgs>> mapped_calls;
  std::vector<std::vector<uint32_t>> maps;
  size_t bytes = 0;
};

// Canonical row -> stored row of llama.cpp's per-head interleave (rows h·D + 2i + p hold the
// canonical h·D + p·D/2 + i).
std::vector<uint32_t> interleave_map(uint32_t rows, uint32_t head_dim) {
  std::vector<uint32_t> map(rows);
  for (uint32_t h = 0; h < rows / head_dim; ++h)
    for (uint32_t i = 0; i < head_dim / 2; ++i)
      for (uint32_t q = 0; q < 2; ++q)
        map[h * head_dim + q * head_dim / 2 + i] = h * head_dim + 2 * i + q;
  return map;
}

DecodeSet make_set(GgmlType t, const std::vector<Proj>& layer, uint32_t layers, uint32_t T,
                   uint32_t head_dim) {
  DecodeSet s;
  for (uint32_t l = 0; l < layers; ++l)
    for (const Proj& pr : layer) s.bytes += size_t(pr.out) * kernels::quant::row_bytes(t, pr.in);
  s.arena = std::make_unique<Arena>(s.bytes);
  size_t at = 0;
  for (uint32_t l = 0; l < layers; ++l) {
    for (size_t p = 0; p < layer.size(); ++p) {
      const Proj& pr = layer[p];
      const std::vector<uint8_t> b =
          bench::random_blocks(t, pr.out, pr.in, 12345 + uint32_t(s.blocks.size()));
      std::copy(b.begin(), b.end(), s.arena->data + at);
      s.blocks.push_back(s.arena->data + at);
      at += b.size();
    }
  }
  s.x.resize(s.blocks.size()), s.y.resize(s.blocks.size());
  size_t k = 0;
  for (uint32_t l = 0; l < layers; ++l) {
    int call = -1;
    for (size_t p = 0; p < layer.size(); ++p, ++k) {
      const Proj& pr = layer[p];
      // Projections of one call share their input (as Q, K and V do), so it is quantized once.
      if (pr.call != call) {
        s.x[k].resize(size_t(pr.in) * T);
        for (size_t i = 0; i < s.x[k].size(); ++i) s.x[k][i] = std::sin(0.01f * float(i + k));
      }
      s.y[k].resize(size_t(pr.out) * T);
      if (pr.call != call) s.calls.emplace_back(), call = pr.call;
      const kernels::MatrixView v{t,      s.blocks[k], kernels::quant::row_bytes(t, pr.in),
                                  pr.out, pr.in,       nullptr};
      const float* x = s.x[k].empty() ? s.calls.back().back().x : s.x[k].data();
      s.calls.back().push_back(kernels::MatmulArgs{x, v, nullptr, s.y[k].data(), T});
    }
  }
  // Q and K: the first two projections of a layer's first call.
  s.maps = {interleave_map(layer[0].out, head_dim), interleave_map(layer[1].out, head_dim)};
  s.mapped_calls = s.calls;
  for (size_t c = 0; c < s.mapped_calls.size(); c += s.calls.size() / layers)
    for (size_t p = 0; p < 2; ++p) s.mapped_calls[c][p].w.row_map = s.maps[p].data();
  return s;
}

}  // namespace

// Over 80 lines on purpose: a benchmark's main is its measurement script, read top to bottom.
int main(int argc, char** argv) {
  uint32_t threads = 2, rounds = 7, resident = 0, tokens = 1, bandwidth_only = 0;
  size_t mb = 600, bw_mb = 1024;
  std::string shape = "1b", types = "Q4_0,Q4_K", kernel_names = "fast,avx2,exact";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--threads") threads = uint32_t(std::stoul(v));
    else if (k == "--rounds") rounds = uint32_t(std::stoul(v));
    else if (k == "--mb") mb = std::stoul(v);
    else if (k == "--bw-mb") bw_mb = std::stoul(v);
    else if (k == "--shape") shape = v;
    else if (k == "--types") types = v;
    else if (k == "--kernels") kernel_names = v;
    else if (k == "--resident") resident = uint32_t(std::stoul(v));
    else if (k == "--tokens") tokens = std::max(1u, uint32_t(std::stoul(v)));
    else if (k == "--bandwidth-only") bandwidth_only = uint32_t(std::stoul(v));
    else if (k == "--pages") g_huge_pages = v != "4k";
    else std::fprintf(stderr, "ignoring unknown option %s\n", k.c_str());
  }
  rounds = std::max(rounds, 1u);  // the medians need one
  if (resident) threads = 1;
  kernels::ThreadPool pool(threads);

  if (resident) bw_mb = 4;
  const size_t bw_bytes = (bw_mb << 20) / (size_t(4) << 20) * (size_t(4) << 20);
  Arena bw_arena(bw_bytes);
  uint8_t* buf = bw_arena.data;
  for (size_t i = 0; i < bw_bytes; ++i) buf[i] = uint8_t(i * 7);  // touch every page
  uint64_t sink = 0;
  if (bandwidth_only) {
    std::vector<double> bw;
    for (uint32_t r = 0; r < rounds + 1; ++r) {  // round 0 warms up
      const Times tb = timed([&] { read_pass(pool, buf, bw_bytes, sink); });
      if (r > 0) bw.push_back(double(bw_bytes) / tb.wall * 1e-9);
    }
    std::printf(
        "read bandwidth: median %.1f GB/s, best %.1f GB/s (%zu MiB, %u threads, %u rounds)\n",
        median(bw), *std::max_element(bw.begin(), bw.end()), bw_bytes >> 20, threads, rounds);
    return sink == 42 ? 1 : 0;
  }

  uint32_t shape_layers = 0;
  const std::vector<Proj> layer = layer_shape(shape, shape_layers);
  std::printf(
      "decode weight streaming vs read bandwidth: %u threads, %s-shaped layers, %u token(s) a "
      "step, %u rounds; fast = %s; load %s\n",
      threads, shape.c_str(), tokens, rounds,
      kernels::matmul_kernels(kernels::MatmulPath::Fast).c_str(), [] {
        static char b[64] = "?";
        if (FILE* f = std::fopen("/proc/loadavg", "r")) {
          if (!std::fgets(b, sizeof b, f)) b[0] = 0;
          std::fclose(f);
        }
        for (char* c = b; *c; ++c)
          if (*c == '\n') *c = 0;
        return b;
      }());
  std::printf(
      "| type | kernel | MB a token | median GB/s | best GB/s | median / read bandwidth |"
      " CPU-time GB/s | CPU-time / read bandwidth |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (const std::string& tn : split(types)) {
    const GgmlType t = type_by_name(tn);
    size_t layer_bytes = 0;
    for (const Proj& p : layer) layer_bytes += size_t(p.out) * kernels::quant::row_bytes(t, p.in);
    if (resident) {
      const uint32_t in = 2048,
                     rows = uint32_t(std::max<size_t>(
                         8, (size_t(1) << 20) / kernels::quant::row_bytes(t, in) / 8 * 8));
      const std::vector<uint8_t> w = bench::random_blocks(t, rows, in);
      std::vector<float> x(in), y(rows);
      for (uint32_t i = 0; i < in; ++i) x[i] = std::sin(0.01f * float(i));
      const kernels::MatmulArgs a{
          x.data(),
          {t, w.data(), kernels::quant::row_bytes(t, in), rows, in, nullptr},
          nullptr,
          y.data(),
          1};
      for (const std::string& kn : split(kernel_names)) {
        std::function<void()> fn;
        if (kn == "fast")
          fn = [&] { kernels::cpu::matmul(&pool, {&a, 1}, kernels::MatmulPath::Fast); };
        else if (kn == "exact")
          fn = [&] { kernels::cpu::matmul(&pool, {&a, 1}, kernels::MatmulPath::Exact); };
        else if (kn == "avx2" && kernels::qdot_supported(t) &&
                 kernels::qisa_available(kernels::QIsa::Avx2))
          fn = [&] { kernels::cpu::qdot(&pool, {&a, 1}, kernels::QIsa::Avx2); };
        else continue;
        std::vector<double> g;
        for (uint32_t r = 0; r < rounds + 1; ++r) {
          const int reps = 50;
          const double t0 = thread_cpu_now();
          for (int i = 0; i < reps; ++i) fn();
          if (r > 0) g.push_back(double(w.size()) * reps / (thread_cpu_now() - t0) * 1e-9);
        }
        std::printf("| %s | %s (resident, 1 thread, CPU time) | %.2f | %.1f | %.1f | | | |\n",
                    tn.c_str(), kn.c_str(), double(w.size()) * 1e-6, median(g),
                    *std::max_element(g.begin(), g.end()));
      }
      continue;
    }
    const uint32_t layers = uint32_t(std::min<size_t>(
        shape_layers, std::max<size_t>(1, ((mb << 20) + layer_bytes - 1) / layer_bytes)));
    DecodeSet set = make_set(t, layer, layers, tokens, shape == "8b" ? 128 : 64);
    struct Kernel {
      std::string name;
      std::function<void(std::span<const kernels::MatmulArgs>)> run;
      bool mapped = false;  // over set.mapped_calls
    };
    std::vector<Kernel> ks;
    for (const std::string& kn : split(kernel_names)) {
      if (kn == "fast")
        ks.push_back({kn, [&](std::span<const kernels::MatmulArgs> c) {
                        kernels::cpu::matmul(&pool, c, kernels::MatmulPath::Fast);
                      }});
      else if (kn == "fast-mapped")
        ks.push_back({kn,
                      [&](std::span<const kernels::MatmulArgs> c) {
                        kernels::cpu::matmul(&pool, c, kernels::MatmulPath::Fast);
                      },
                      true});
      else if (kn == "exact")
        ks.push_back({kn, [&](std::span<const kernels::MatmulArgs> c) {
                        kernels::cpu::matmul(&pool, c, kernels::MatmulPath::Exact);
                      }});
      else if (kn == "avx2" && kernels::qdot_supported(t) &&
               kernels::qisa_available(kernels::QIsa::Avx2))
        ks.push_back({kn, [&](std::span<const kernels::MatmulArgs> c) {
                        kernels::cpu::qdot(&pool, c, kernels::QIsa::Avx2);
                      }});
    }
    std::vector<double> bw, bw_cpu;
    std::vector<std::vector<double>> gbs(ks.size()), gbs_cpu(ks.size());
    auto rate = [&](double bytes, Times t, std::vector<double>& wall, std::vector<double>& cpu) {
      wall.push_back(bytes / t.wall * 1e-9);
      cpu.push_back(bytes / (t.cpu / threads) * 1e-9);
    };
    for (uint32_t r = 0; r < rounds + 1; ++r) {  // round 0 warms up
      const Times tb = timed([&] { read_pass(pool, buf, bw_bytes, sink); });
      if (r > 0) rate(double(bw_bytes), tb, bw, bw_cpu);
      for (size_t k = 0; k < ks.size(); ++k) {
        const Times tk = timed([&] {
          for (const auto& call : ks[k].mapped ? set.mapped_calls : set.calls) ks[k].run(call);
        });
        if (r > 0) rate(double(set.bytes), tk, gbs[k], gbs_cpu[k]);
      }
    }
    const double bw_med = median(bw), bw_cpu_med = median(bw_cpu);
    for (size_t k = 0; k < ks.size(); ++k)
      std::printf("| %s | %s | %.0f (%u layers) | %.1f | %.1f | %.0f%% | %.1f | %.0f%% |\n",
                  tn.c_str(), ks[k].name.c_str(), double(set.bytes) * 1e-6, layers, median(gbs[k]),
                  *std::max_element(gbs[k].begin(), gbs[k].end()), 100.0 * median(gbs[k]) / bw_med,
                  median(gbs_cpu[k]), 100.0 * median(gbs_cpu[k]) / bw_cpu_med);
    std::printf(
        "| %s | read bandwidth (%zu MiB, same rounds) | | %.1f | %.1f | 100%% | %.1f | 100%% |\n",
        tn.c_str(), bw_bytes >> 20, bw_med, *std::max_element(bw.begin(), bw.end()), bw_cpu_med);
  }
  return sink == 42 ? 1 : 0;  // keeps the reads
}
