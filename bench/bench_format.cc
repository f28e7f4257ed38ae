// bench_format: .kvz write and read throughput on a ~100 MB cache in the page cache, as a fraction
// of memcpy measured in the same run, and zstd ratio and speed at several levels. The cache has
// the shape of SmolLM2-135M (L 30, Hkv 3, D 64) filled with Gaussian-like values (per-dimension
// scales, full f32 mantissas): real caches come later, so the zstd numbers are a floor.
// Usage: bench_format [--mb N] [--dir DIR] [--zstd-mb N]. Best of 3 runs per number.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "format/format.h"

namespace {

using namespace kvzip::format;
using Clock = std::chrono::steady_clock;

struct Args {
  double mb = 100;     // size of the cache for write/read
  double zstd_mb = 8;  // size of the cache for the zstd table
  std::string dir = std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp";
};

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Sum of 4 uniforms: cheap, roughly Gaussian.
float gaussish(uint64_t& s) {
  float x = 0;
  for (int i = 0; i < 4; ++i) x += static_cast<float>(splitmix(s) >> 40) / 16777216.0f;
  return x - 2.0f;
}

// A cache of about `mb` MB of f32 K/V: L 30, Hkv 3, D 64, prefix 32 rows always kept.
CacheContents make_cache(double mb, DType dtype) {
  const uint32_t L = 30, H = 3, D = 64, prefix = 32;
  uint64_t rows_per_head = static_cast<uint64_t>(mb * 1e6 / (2.0 * 4 * D * L * H));
  uint64_t doc = rows_per_head * 2;  // ratio 0.5
  CacheContents c;
  CacheHeader& h = c.header;
  h.tool_version = "kvzip bench";
  h.model = {"llama", "bench", 1, 2};
  h.n_layers = L;
  h.n_kv_heads = H;
  h.head_dim = D;
  h.kv_dtype = dtype;
  for (uint32_t i = 0; i < prefix; ++i) h.prefix_tokens.push_back(i);
  for (uint64_t i = 0; i < doc; ++i)
    h.document_tokens.push_back(static_cast<uint32_t>(1000 + i % 30000));
  h.document_text = std::string(doc * 5, 'x');
  h.method = "bench";
  h.requested_ratio = h.achieved_ratio = 0.5;
  c.has_scores = true;
  uint64_t seed = 42;
  std::vector<float> scale(D);
  for (uint32_t d = 0; d < D; ++d) scale[d] = 0.2f + 3.0f * static_cast<float>(d % 7) / 7.0f;
  for (uint32_t l = 0; l < L; ++l) {
    LayerKv& layer = c.layers.emplace_back();
    for (uint32_t hd = 0; hd < H; ++hd) {
      uint64_t kept = 0;
      for (uint64_t p = 0; p < prefix + doc && kept < prefix + rows_per_head; ++p) {
        if (p >= prefix && (splitmix(seed) & 1)) continue;
        layer.positions.push_back(static_cast<uint32_t>(p));
        layer.scores.push_back(static_cast<float>(splitmix(seed) >> 40) / 16777216.0f);
        for (uint32_t d = 0; d < D; ++d) {
          layer.k.push_back(scale[d] * gaussish(seed));
          layer.v.push_back(0.5f * gaussish(seed));
        }
        ++kept;
      }
      layer.head_rows.push_back(static_cast<uint32_t>(kept));
    }
  }
  return c;
}

uint64_t kv_bytes(const CacheContents& c) {
  uint64_t n = 0;
  for (const LayerKv& l : c.layers) n += (l.k.size() + l.v.size()) * 4;
  return n;
}

double best_seconds(int runs, const std::function<void()>& f) {
  double best = 1e30;
  for (int i = 0; i < runs; ++i) {
    auto t0 = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

double memcpy_gbps(uint64_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  double s = best_seconds(3, [&] {
    std::memcpy(b.data(), a.data(), bytes);
    asm volatile("" ::"r"(b.data()) : "memory");
  });
  return bytes / s / 1e9;
}

void row(const char* what, uint64_t bytes, double seconds, double memcpy) {
  double gbps = bytes / seconds / 1e9;
  std::printf("  %-52s %6.2f GB/s  %6.1f%% of memcpy\n", what, gbps, 100.0 * gbps / memcpy);
}

// What the OS allows on this machine: write(2) of the bytes to a new file + fsync, and pread(2)
// of a file in the page cache. The .kvz numbers below cannot beat these.
void os_baselines(uint64_t bytes, const std::string& path, double mc) {
  std::vector<char> buf(bytes, 3);
  std::string raw = path + ".raw";
  row("OS: write(2) to a new file + fsync", bytes,
      best_seconds(3,
                   [&] {
                     ::unlink(raw.c_str());
                     int fd = ::open(raw.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
                     for (uint64_t at = 0; at < bytes;)
                       at += static_cast<uint64_t>(::write(fd, buf.data() + at, bytes - at));
                     ::fsync(fd);
                     ::close(fd);
                   }),
      mc);
  row("OS: pread(2) of that file (page cache)", bytes,
      best_seconds(3,
                   [&] {
                     int fd = ::open(raw.c_str(), O_RDONLY);
                     for (uint64_t at = 0; at < bytes;)
                       at += static_cast<uint64_t>(
                           ::pread(fd, buf.data() + at, bytes - at, static_cast<off_t>(at)));
                     ::close(fd);
                   }),
      mc);
  ::unlink(raw.c_str());
}

void throughput(const Args& a) {
  CacheContents c = make_cache(a.mb, DType::F32);
  uint64_t bytes = kv_bytes(c);
  double mc = memcpy_gbps(bytes);
  std::string path = a.dir + "/kvzip-bench.kvz";
  WriteOptions force;
  force.force = true;
  std::printf(
      "cache: %u layers x %u KV heads x D %u, %.1f MB of K/V as f32, file in %s\n"
      "(GB/s count the f32 bytes of the cache, also for f16 files)\n",
      c.header.n_layers, c.header.n_kv_heads, c.header.head_dim, bytes / 1e6, a.dir.c_str());
  std::printf("  %-52s %6.2f GB/s\n", "memcpy (same bytes, same run)", mc);
  os_baselines(bytes, path, mc);
  row("write f32 (serialise, xxh64, fsync, rename)", bytes,
      best_seconds(3, [&] { write_cache_file(c, path, force); }), mc);
  row("serialise f32 to a counting sink (xxh64)", bytes,
      best_seconds(3,
                   [&] {
                     CountingSink s;
                     write_cache(c, s);
                   }),
      mc);
  std::vector<std::vector<float>> k(c.header.n_layers), v(c.header.n_layers);
  for (uint32_t l = 0; l < c.header.n_layers; ++l) {
    k[l].resize(c.layers[l].k.size());
    v[l].resize(c.layers[l].v.size());
  }
  auto read_all = [&](Verify verify) {
    CacheReader r = CacheReader::open(path, {verify});
    for (uint32_t l = 0; l < r.header().n_layers; ++l) r.read_kv(l, k[l], v[l]);
  };
  row("read f32: open + copy every layer (no K/V hash)", bytes,
      best_seconds(3, [&] { read_all(Verify::Metadata); }), mc);
  row("read f32: open + hash + copy every layer", bytes,
      best_seconds(3, [&] { read_all(Verify::OnAccess); }), mc);
  row("read f32: open + hash, zero-copy views", bytes,
      best_seconds(3,
                   [&] {
                     CacheReader r = CacheReader::open(path, {Verify::OnAccess});
                     for (uint32_t l = 0; l < r.header().n_layers; ++l) (void)r.kv_view(l);
                   }),
      mc);
  CacheContents h16 = make_cache(a.mb, DType::F16);
  row("write f16 (convert, xxh64, fsync, rename)", bytes,
      best_seconds(3, [&] { write_cache_file(h16, path, force); }), mc);
  row("read f16: open + hash + convert every layer", bytes,
      best_seconds(3, [&] { read_all(Verify::OnAccess); }), mc);
  std::filesystem::remove(path);
}

void zstd_table(const Args& a) {
  std::printf(
      "\nzstd on K/V sections: cache of %.0f MB as f32, stored as the dtype; ratio = raw / "
      "stored;\n"
      "MB/s of raw (dtype) bytes; write = whole file to disk, read = open + decode every layer\n",
      a.zstd_mb);
  std::printf("  %-5s %5s %8s %12s %12s\n", "dtype", "level", "ratio", "write MB/s", "read MB/s");
  std::string path = a.dir + "/kvzip-bench-zstd.kvz";
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    CacheContents c = make_cache(a.zstd_mb, t);
    for (int level : {0, 1, 3, 9, 19}) {
      WriteOptions o;
      o.force = true;
      o.zstd_level = level;
      double ws = best_seconds(level >= 19 ? 1 : 3, [&] { write_cache_file(c, path, o); });
      CacheReader r = CacheReader::open(path);
      uint64_t raw = 0, stored = 0;
      for (const SectionInfo& s : r.sections())
        if (s.name == "kv") raw += s.raw_size, stored += s.stored_size;
      double rs = best_seconds(3, [&] {
        CacheReader rr = CacheReader::open(path);
        for (uint32_t l = 0; l < rr.header().n_layers; ++l) (void)rr.load_layer(l);
      });
      std::printf("  %-5s %5d %8.3f %12.0f %12.0f\n", dtype_name(t), level,
                  static_cast<double>(raw) / stored, raw / ws / 1e6, raw / rs / 1e6);
    }
  }
  std::filesystem::remove(path);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--mb") a.mb = std::atof(argv[i + 1]);
    else if (k == "--zstd-mb") a.zstd_mb = std::atof(argv[i + 1]);
    else if (k == "--dir") a.dir = argv[i + 1];
    else return std::fprintf(stderr, "usage: bench_format [--mb N] [--zstd-mb N] [--dir DIR]\n"), 2;
  }
  try {
    throughput(a);
    zstd_table(a);
  } catch (const kvzip::Error& e) {
    std::fprintf(stderr, "bench_format: %s\n", e.what());
    return 1;
  }
  return 0;
}
