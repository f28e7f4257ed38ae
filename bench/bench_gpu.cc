// GPU benchmarks on a synthetic model with real shapes (default Llama-3-8B: L=32, E=4096, Hq=32,
// Hkv=8, D=128, F=14336, V=128256; random bf16 weights drawn on the device). Measures, after one
// warm-up each: device-to-device copy bandwidth (bytes read + written), prefill tokens/s at 8K and
// 32K, KVzip scoring time as a multiple of the 8K prefill (target <= 2.2x), split-row decode
// attention over a ratio-0.3 ragged cache as a fraction of the copy bandwidth (target >= 70%),
// end-to-end decode ms/token from a ratio-0.3 cache vs the full one, and .kvz load time into GPU
// memory vs file size (the file goes to the temp folder). Prints a short table last; --out DIR
// also writes DIR/bench_gpu.csv.
// Usage: bench_gpu [--out DIR] [--long 32768] [--short 8192] [--layers 32] [--quick]
// Exits 0 with a "skipped" line when there is no CUDA build or device.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_shapes.h"
#include "cache/gpu_cache.h"
#include "common/error.h"
#include "compress/pipeline.h"
#include "format/format.h"
#include "kernels/attention.h"
#include "kernels/device.h"
#include "kernels/gpu.h"
#include "loader/loader.h"
#include "model/gpu_forward.h"

using namespace kvzip;
using Clock = std::chrono::steady_clock;

namespace {

double secs(Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); }

struct Row {
  std::string metric, value, target;
};
std::vector<Row> g_rows;

void report(const std::string& metric, double v, const char* fmt, const std::string& target = "") {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  g_rows.push_back({metric, buf, target});
  std::printf("  %-46s %s %s\n", metric.c_str(), buf, target.c_str());
  std::fflush(stdout);
}

std::vector<int32_t> random_tokens(size_t n, uint32_t V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % V);
  return t;
}

// Per-head kept rows of a ratio-r cache: lengths spread ±60% around r·T (KVzip keeps very
// different numbers per head), clamped to [1, T].
std::vector<uint32_t> ragged_kept(const ModelConfig& c, uint32_t T, double r, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> kept(size_t(c.n_layers) * c.n_kv_heads);
  for (auto& k : kept) {
    const double f = 0.4 + 1.2 * double(rng() >> 11) / double(1ull << 53);
    k = static_cast<uint32_t>(std::clamp(r * T * f, 1.0, double(T)));
  }
  return kept;
}

double copy_bandwidth() {
  const size_t bytes = size_t(2) << 30;
  kernels::gpu::GpuBuffer<uint8_t> a(bytes), b(bytes);
  kernels::gpu::fill_zero(a.data(), bytes);
  kernels::gpu::copy_device(b.data(), a.data(), bytes);  // warm-up
  kernels::gpu::synchronize();
  const int reps = 10;
  auto t = Clock::now();
  for (int i = 0; i < reps; ++i) kernels::gpu::copy_device(b.data(), a.data(), bytes);
  kernels::gpu::synchronize();
  return 2.0 * bytes * reps / secs(t);  // read + write
}

double decode_attention_bandwidth(const ModelConfig& c, uint32_t T, double copy_bw) {
  const std::vector<uint32_t> kept = ragged_kept(c, T, 0.3, 11);
  model::GpuCache cache = model::GpuCache::random(model::cache_shape(c), T, kept, 16, 5);
  kernels::gpu::GpuBuffer<float> q(size_t(c.n_heads) * c.head_dim), out(q.size());
  std::vector<float> hq(q.size(), 0.01f);
  q.upload(hq);
  std::vector<std::vector<kernels::KvSpan>> spans(c.n_layers,
                                                  std::vector<kernels::KvSpan>(c.n_kv_heads));
  double bytes_per_pass = 0;
  for (uint32_t l = 0; l < c.n_layers; ++l)
    for (uint32_t h = 0; h < c.n_kv_heads; ++h) {
      spans[l][h] = kernels::KvSpan{cache.k(l, h), cache.v(l, h), cache.len(l, h)};
      bytes_per_pass += 2.0 * cache.len(l, h) * c.head_dim * sizeof(float);
    }
  auto pass = [&] {
    for (uint32_t l = 0; l < c.n_layers; ++l)
      kernels::cuda::attention_decode(
          kernels::AttentionArgs{q.data(), spans[l].data(), out.data(), 1, c.n_heads, c.n_kv_heads,
                                 c.head_dim, 0.088f},
          nullptr);
  };
  pass();
  kernels::gpu::synchronize();
  const int reps = 20;
  auto t = Clock::now();
  for (int i = 0; i < reps; ++i) pass();
  kernels::gpu::synchronize();
  const double s = secs(t);
  const double bw = bytes_per_pass * reps / s;
  report("ragged decode attention, ratio 0.3 of " + std::to_string(T) + " (GB/s)", bw / 1e9,
         "%.0f");
  report("  as a fraction of D2D copy bandwidth", bw / copy_bw, "%.2f", "(target >= 0.70)");
  report("  per layer (us)", s / reps / c.n_layers * 1e6, "%.1f");
  return bw;
}

double prefill_tps(model::GpuForward& f, uint32_t T, double* seconds) {
  const ModelConfig& c = f.config();
  model::GpuCache cache(model::cache_shape(c), T + 64);
  const auto tokens = random_tokens(T, c.vocab_size, T);
  auto t = Clock::now();
  f.prefill(cache, tokens, model::LogitsMode::Last);
  *seconds = secs(t);
  return T / *seconds;
}

void kvzip_vs_prefill(model::GpuForward& f, uint32_t T) {
  const ModelConfig& c = f.config();
  const uint32_t n_p = 32;
  const auto prefix = random_tokens(n_p, c.vocab_size, 1),
             doc = random_tokens(T - n_p, c.vocab_size, 2);
  compress::CompressOptions co;
  co.method = "kvzip";
  co.ratio = 0.3;
  co.scorer.prompts.first = random_tokens(9, c.vocab_size, 3);
  co.scorer.prompts.next = random_tokens(13, c.vocab_size, 4);
  co.scorer.prompts.turn_end = random_tokens(5, c.vocab_size, 5);
  co.prefill.chunk = 2048;  // GpuForward's own chunk, as `kvzip compress --device cuda` uses
  compress::CompressResult r = compress::compress_gpu(f, prefix, doc, co);
  report("KVzip prefill " + std::to_string(T) + " (s)", r.prefill_s, "%.2f");
  report("KVzip scoring passes (s)", r.scoring_s, "%.2f");
  report("KVzip compress time / prefill", (r.prefill_s + r.scoring_s) / r.prefill_s, "%.2f",
         "(target <= 2.2)");
  report("  select + evict on the host (s)", r.select_s, "%.2f");
}

void decode_ms(model::GpuForward& f, uint32_t T, int n) {
  const ModelConfig& c = f.config();
  double ms[2];
  for (int which = 0; which < 2; ++which) {
    const std::vector<uint32_t> kept =
        which == 0 ? std::vector<uint32_t>(size_t(c.n_layers) * c.n_kv_heads, T)
                   : ragged_kept(c, T, 0.3, 12);
    model::GpuCache cache =
        model::GpuCache::random(model::cache_shape(c), T, kept, uint32_t(n) + 8, 6);
    f.decode(cache, 1);  // warm-up
    cache.reset();
    auto t = Clock::now();
    for (int i = 0; i < n; ++i) f.decode(cache, 100 + i);
    ms[which] = secs(t) * 1e3 / n;
  }
  report("decode ms/token, full cache of " + std::to_string(T), ms[0], "%.2f");
  report("decode ms/token, ratio-0.3 cache", ms[1], "%.2f");
  report("  speed-up of the compressed cache", ms[0] / ms[1], "%.2f");
}

// A ratio-0.3 cache of T tokens written as .kvz, then reader -> host ragged cache -> GpuCache.
void load_to_gpu(const ModelConfig& c, uint32_t T, const std::string& dir) {
  const std::vector<uint32_t> kept = ragged_kept(c, T, 0.3, 13);
  format::CacheContents fc;
  format::CacheHeader& h = fc.header;
  h.tool_version = "kvzip bench_gpu";
  h.model.arch = "llama";
  h.model.name = "synthetic";
  h.n_layers = c.n_layers;
  h.n_kv_heads = c.n_kv_heads;
  h.head_dim = c.head_dim;
  h.rope_base = c.rope_base;
  h.prefix_tokens = {1};
  h.document_tokens.assign(T - 1, 7);
  h.method = "kvzip";
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    format::LayerKv lk;
    for (uint32_t hh = 0; hh < c.n_kv_heads; ++hh) {
      const uint32_t n = kept[size_t(l) * c.n_kv_heads + hh];
      lk.head_rows.push_back(n);
      for (uint32_t r = 0; r < n; ++r) lk.positions.push_back(uint32_t(uint64_t(r) * T / n));
    }
    lk.k.resize(lk.positions.size() * c.head_dim);
    lk.v.resize(lk.k.size());
    for (float& x : lk.k) x = u(rng);
    for (float& x : lk.v) x = u(rng);
    fc.layers.push_back(std::move(lk));
  }
  const std::string path = dir + "/bench_gpu_load.kvz";
  format::WriteOptions wo;
  wo.force = true;
  format::write_cache_file(fc, path, wo);
  const double mb = std::filesystem::file_size(path) / 1e6;
  fc = {};
  kernels::gpu::synchronize();
  auto t = Clock::now();
  {
    format::CacheReader reader = format::CacheReader::open(path);
    model::GpuCache g = loader::gpu_cache_from_reader(reader, 16);
  }
  const double direct_s = secs(t);
  t = Clock::now();
  format::CacheReader reader = format::CacheReader::open(path);
  model::RaggedKvCache host = loader::cache_from_reader(reader, 16);
  const double host_s = secs(t);
  model::GpuCache g = model::GpuCache::from_ragged(host, 16);
  const double via_host_s = secs(t);
  report(".kvz file size (MB)", mb, "%.0f");
  report(".kvz -> GPU memory, direct (s)", direct_s, "%.3f");
  report("  effective load rate (GB/s)", mb / 1e3 / direct_s, "%.2f");
  report(".kvz -> host cache -> GPU (s)", via_host_s, "%.3f");
  report("  of which file -> host ragged cache (s)", host_s, "%.3f");
  std::filesystem::remove(path);
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_dir;
  uint32_t long_T = 32768, short_T = 8192, layers = 32;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--out") out_dir = next();
    else if (a == "--long") long_T = std::atoi(next().c_str());
    else if (a == "--short") short_T = std::atoi(next().c_str());
    else if (a == "--layers") layers = std::atoi(next().c_str());
    else if (a == "--quick") long_T = 8192, short_T = 2048, layers = 4;
  }
  if (!kernels::kBuiltWithCuda || kernels::cuda_device_count() == 0) {
    std::printf("bench_gpu: skipped (%s)\n",
                kernels::kBuiltWithCuda ? "no CUDA device" : "built without CUDA");
    return 0;
  }
  int status = 0;
  // Each part runs on its own: a failure is reported in the table and the others still run.
  auto part = [&](const char* name, auto&& fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      const Error* ke = dynamic_cast<const Error*>(&e);
      std::fprintf(stderr, "bench_gpu: %s failed: %s%s\n", name, ke ? errc_name(ke->code()) : "",
                   e.what());
      g_rows.push_back({std::string(name), "FAILED", e.what()});
      status = 1;
    }
  };
  const kernels::gpu::DeviceInfo info = kernels::gpu::device_info();
  std::printf("bench_gpu on %s (%d SMs, %.0f GiB), synthetic Llama-3-8B shapes, L=%u\n", info.name,
              info.sm_count, info.total_bytes / 1073741824.0, layers);
  const ModelConfig cfg = bench::llama3_8b_config(layers);
  double bw = 0;
  part("copy bandwidth", [&] {
    bw = copy_bandwidth();
    report("D2D copy bandwidth, read+write (GB/s)", bw / 1e9, "%.0f");
  });
  part("decode attention", [&] { decode_attention_bandwidth(cfg, long_T, bw); });
  part("model", [&] {
    model::GpuForward f(cfg, 42);
    report("weights on the device (GB, bf16)", f.weight_bytes() / 1e9, "%.2f");
    double s = 0;
    prefill_tps(f, 1024, &s);  // warm-up: cuBLAS heuristics, module load
    part("prefill short", [&] {
      report("prefill tokens/s at " + std::to_string(short_T), prefill_tps(f, short_T, &s), "%.0f");
    });
    part("prefill long", [&] {
      report("prefill tokens/s at " + std::to_string(long_T), prefill_tps(f, long_T, &s), "%.0f");
    });
    part("kvzip", [&] { kvzip_vs_prefill(f, short_T); });
    part("decode", [&] { decode_ms(f, long_T, 32); });
  });
  part(".kvz load",
       [&] { load_to_gpu(cfg, short_T, std::filesystem::temp_directory_path().string()); });
  std::printf("\n%-48s %-12s %s\n", "metric", "value", "target");
  for (const Row& r : g_rows)
    std::printf("%-48s %-12s %s\n", r.metric.c_str(), r.value.c_str(), r.target.c_str());
  if (!out_dir.empty()) {
    std::ofstream csv(out_dir + "/bench_gpu.csv");
    csv << "metric,value,target\n";
    for (const Row& r : g_rows)
      csv << '"' << r.metric << "\"," << r.value << ",\"" << r.target << "\"\n";
  }
  return status;
}
