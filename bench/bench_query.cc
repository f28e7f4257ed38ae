// Answering from a .kvz versus re-reading the document, on the real model.
// Usage: bench_query FULL.kvz SMALL.kvz [--threads N] [--reps R] [--decode N] [--fresh 0|1]
//   FULL.kvz  : the document compressed with --method full (ratio 1)
//   SMALL.kvz : the same document compressed at a smaller ratio (e.g. kvzip 0.3)
// Prints, best of R: (a) a fresh prefill of [prefix ; document ; question] to the first token,
// (b) opening SMALL.kvz + the question's prefill to the first token, their ratio, and
// (c) decode tokens/s over N tokens (stop tokens ignored) from SMALL and from FULL. --fresh 0
// leaves out (a) and (b) (a long document's fresh prefill on a large model takes minutes).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "bench/query_setup.h"

using namespace kvzip;
using Clock = std::chrono::steady_clock;

static double secs(Clock::time_point a) {
  return std::chrono::duration<double>(Clock::now() - a).count();
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: bench_query FULL.kvz SMALL.kvz [--threads N] [--reps R] [--decode N] "
                 "[--fresh 0|1]\n");
    return 2;
  }
  const std::string full_path = argv[1], small_path = argv[2];
  uint32_t threads = 2, reps = 3, n_decode = 64;
  bool fresh_prefill = true;
  for (int i = 3; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--decode")) n_decode = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--fresh")) fresh_prefill = std::atoi(argv[i + 1]) != 0;
  }
  try {
    const bench::QuerySetup q = bench::query_setup(threads);
    const model::Model* model = q.model.get();
    const std::string& question = q.question;
    const loader::SessionOptions& so = q.session;

    // The prompt a plain run would prefill: the same tokens the cache file was made from.
    const format::CacheReader reader = format::CacheReader::open(full_path);
    const format::CacheHeader& h = reader.header();
    std::vector<int32_t> prompt(h.prefix_tokens.begin(), h.prefix_tokens.end());
    prompt.insert(prompt.end(), h.document_tokens.begin(), h.document_tokens.end());
    const auto qt = loader::question_tokens(model->tokenizer(), h, question);
    prompt.insert(prompt.end(), qt.begin(), qt.end());

    model::GenerateParams one;
    one.max_tokens = 1;
    double fresh = 1e30, from_file = 1e30, load_only = 1e30;
    for (uint32_t r = 0; r < (fresh_prefill ? reps : 0); ++r) {
      {
        model::ForwardOptions fo;
        fo.threads = threads;
        model::Forward fwd(model->weights(), fo);
        model::KvCache cache(model->config(), static_cast<uint32_t>(prompt.size()) + 8);
        const auto t0 = Clock::now();
        generate(fwd, cache, prompt, one);
        fresh = std::min(fresh, secs(t0));
      }
      {
        const auto t0 = Clock::now();
        loader::QuerySession s(*model, small_path, so);
        load_only = std::min(load_only, secs(t0));
        s.ask(question, one);
        from_file = std::min(from_file, secs(t0));
      }
    }
    std::printf("prompt %zu tokens (document %zu), threads %u, best of %u\n", prompt.size(),
                h.document_tokens.size(), threads, reps);
    if (fresh_prefill) {
      std::printf("fresh prefill to first token      %9.1f ms\n", fresh * 1e3);
      std::printf("open %s + first token  %9.1f ms (open alone %.1f ms)\n", small_path.c_str(),
                  from_file * 1e3, load_only * 1e3);
      std::printf("speed-up (fresh / from file)      %9.1fx\n", fresh / from_file);
    }

    model::GenerateParams gp;
    gp.max_tokens = n_decode;  // no stop tokens: always n_decode tokens
    for (const std::string& path : {small_path, full_path}) {
      loader::QuerySession s(*model, path, so);
      double best = 1e30;
      for (uint32_t r = 0; r < reps; ++r) {
        const loader::Answer a = s.ask(question, gp);
        best = std::min(best, bench::decode_step_s(a));
      }
      std::printf("decode from %-28s ratio %.2f: %7.1f tok/s (%zu kept rows)\n", path.c_str(),
                  s.header().achieved_ratio, 1.0 / best,
                  static_cast<size_t>(s.base().kept_total()));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_query: %s\n", e.what());
    return 1;
  }
  return 0;
}
