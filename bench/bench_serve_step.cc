// Batched decode steps of the serving engine against one-at-a-time decoding, on a real model and
// a real .kvz: N requests (BranchCache over the one shared compressed cache) each decode one token
// per step, either as one Forward::step of N rows or as N Forward::decode calls. Prints ms per
// step and the aggregate tokens/s of both, so the gain of reading each weight once per step is
// measured apart from HTTP and scheduling.
//   bench_serve_step MODEL CACHE.kvz [threads] [steps] [tiles]
// tiles = 0 leaves the base's keys untransposed (each call then transposes them, as without
// RaggedKvCache::make_key_tiles), to measure what the tiles save.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "cache/branch_cache.h"
#include "format/format.h"
#include "loader/loader.h"
#include "model/model.h"

using namespace kvzip;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: bench_serve_step MODEL CACHE.kvz [threads] [steps] [tiles 0|1]\n");
    return 2;
  }
  const uint32_t threads = argc > 3 ? uint32_t(std::atoi(argv[3])) : 0;
  const int steps = argc > 4 ? std::atoi(argv[4]) : 8;
  auto model = model::Model::load(argv[1]);
  format::CacheReader reader = format::CacheReader::open(argv[2]);
  model::RaggedKvCache base = loader::cache_from_reader(reader, 1);
  if (argc <= 5 || std::atoi(argv[5]) != 0)
    base.make_key_tiles();  // as the server's loaded caches (loader::base_from_reader)
  model::ForwardOptions fo;
  fo.threads = threads;
  model::Forward fwd(model->weights(), fo);
  const auto prompt =
      loader::question_tokens(model->tokenizer(), reader.header(), "Who ruled Normandy?");
  const uint32_t V = model->config().vocab_size;
  std::printf("%-4s %12s %12s %12s %12s %8s %14s\n", "N", "step_ms", "step_tok/s", "seq_ms",
              "seq_tok/s", "gain", "1cache_T=N_ms");
  for (uint32_t n : {1u, 4u, 16u, 32u}) {
    std::vector<std::unique_ptr<model::BranchCache>> caches;
    for (uint32_t i = 0; i < n; ++i) {
      caches.push_back(std::make_unique<model::BranchCache>(base, 512));
      fwd.prefill(*caches.back(), prompt);
    }
    std::vector<std::vector<float>> logits(n, std::vector<float>(V));
    std::vector<int32_t> tok(n, 42);
    auto t0 = Clock::now();
    for (int s = 0; s < steps; ++s) {
      std::vector<model::StepItem> items;
      for (uint32_t i = 0; i < n; ++i)
        items.push_back(model::StepItem{caches[i].get(), std::span<const int32_t>(&tok[i], 1),
                                        logits[i].data()});
      fwd.step(items);
    }
    const double step_ms =
        std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / steps;
    t0 = Clock::now();
    for (int s = 0; s < steps; ++s)
      for (uint32_t i = 0; i < n; ++i) fwd.decode(*caches[i], tok[i]);
    const double seq_ms =
        std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / steps;
    // The same matmul shapes (T = N) with a single attention call: N tokens into one branch.
    std::vector<int32_t> row(n, 42);
    t0 = Clock::now();
    for (int s = 0; s < steps; ++s) {
      model::BranchCache one(base, 512);
      fwd.prefill(one, row);
    }
    const double one_ms =
        std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / steps;
    std::printf("%-4u %12.1f %12.1f %12.1f %12.1f %7.2fx %14.1f\n", n, step_ms,
                n * 1000.0 / step_ms, seq_ms, n * 1000.0 / seq_ms, seq_ms / step_ms, one_ms);
    std::fflush(stdout);
  }
  return 0;
}
