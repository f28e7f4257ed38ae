// Storage types of a cache file side by side: for each .kvz given, its size, the time to
// open it and build the in-memory cache (QuerySession: checksums, then for q8/q4 the stored rows
// as they are, QuantBase, or dequantized per layer into f32 rows with form "f32"), the K/V bytes
// that cache holds, and decode tokens/s over N tokens from it, on the real model, best of R. A
// q8/q4 file is measured in both forms; `same` says whether their greedy tokens agree.
// Usage: bench_kvq FILE.kvz... [--threads N] [--reps R] [--decode N]
// Typical input: one document pruned to several ratios and dtypes with `kvzip prune --kv-dtype`.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/query_setup.h"

using namespace kvzip;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  std::vector<std::string> files;
  uint32_t threads = 2, reps = 3, n_decode = 64;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (!std::strcmp(argv[i], "--threads") && has_value) threads = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--reps") && has_value) reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--decode") && has_value) n_decode = std::atoi(argv[++i]);
    else files.push_back(argv[i]);
  }
  if (files.empty() || reps == 0 || n_decode < 2) {
    std::fprintf(stderr, "usage: bench_kvq FILE.kvz... [--threads N] [--reps R] [--decode N>=2]\n");
    return 2;
  }
  try {
    const bench::QuerySetup q = bench::query_setup(threads);
    const model::Model* model = q.model.get();
    const std::string& question = q.question;
    const loader::SessionOptions& so = q.session;
    model::GenerateParams gp;
    gp.max_tokens = n_decode;  // no stop tokens: always n_decode tokens
    std::printf("threads %u, best of %u, decode %u tokens\n", threads, reps, n_decode);
    std::printf("%-40s %6s %6s %12s %6s %12s %9s %9s %5s\n", "file", "dtype", "ratio", "bytes",
                "form", "mem_bytes", "load_ms", "tok/s", "same");
    for (const std::string& path : files) {
      const uint64_t bytes =
          format::CacheReader::open(path, {format::Verify::Metadata}).file_size();
      const format::DType stored =
          format::CacheReader::open(path, {format::Verify::Metadata}).header().kv_dtype;
      std::vector<loader::KvForm> forms{loader::KvForm::Auto};
      if (format::dtype_quantized(stored)) forms.push_back(loader::KvForm::F32);
      std::vector<int32_t> first_tokens;
      for (const loader::KvForm form : forms) {
        loader::SessionOptions o = so;
        o.kv_form = form;
        double load = 1e30, step = 1e30, ratio = 0;
        uint64_t mem = 0;
        bool quantized = false;
        std::vector<int32_t> tokens;
        for (uint32_t r = 0; r < reps; ++r) {
          const auto t0 = Clock::now();
          loader::QuerySession s(*model, path, o);
          load = std::min(load, std::chrono::duration<double>(Clock::now() - t0).count());
          const loader::Answer a = s.ask(question, gp);
          step = std::min(step, bench::decode_step_s(a));
          ratio = s.header().achieved_ratio;
          mem = s.base().bytes_kept();
          quantized = s.quantized();
          tokens = a.tokens;
        }
        if (first_tokens.empty()) first_tokens = tokens;
        std::printf("%-40s %6s %6.2f %12llu %6s %12llu %9.1f %9.1f %5s\n", path.c_str(),
                    format::dtype_name(stored), ratio, static_cast<unsigned long long>(bytes),
                    quantized ? format::dtype_name(stored) : "f32",
                    static_cast<unsigned long long>(mem), load * 1e3, 1.0 / step,
                    tokens == first_tokens ? "yes" : "no");
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_kvq: %s\n", e.what());
    return 1;
  }
  return 0;
}
