// Bounded caches during a long generation on the real model: full cache vs R-KV vs
// StreamingLLM (4 sink + recent) at the same budget, same schedule (model/rkv.h).
// Usage: bench_rkv [--threads N] [--tokens N] [--budget B[,B2...]] [--buffer N] [--seed S]
//                  [--temp T]
// The full-cache run samples a continuation X of a story prompt (stop tokens masked, so it runs
// N tokens; fixed-seed temperature sampling avoids greedy loops on a 135M model). Each bounded
// policy then (a) is teacher-forced on X: perplexity of X, the share of positions whose argmax
// equals the full cache's (both also from the first eviction on) and decode tokens/s; (b)
// samples with the same seed until its first token that differs from X (that length is reported).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <sstream>
#include <string>

#include "cache/ragged_cache.h"
#include "checkpoint/model_path.h"
#include "model/model.h"

using namespace kvzip;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  uint32_t threads = 2, tokens = 2048, buffer = 128;
  std::vector<uint32_t> budgets = {256};
  uint64_t seed = 42;
  float temp = 0.8f;
};

// What one pass over the continuation records per position.
struct Pass {
  std::vector<int32_t> tokens;  // sampled (free run) or forced
  std::vector<int32_t> argmax;  // (N) most likely token at each position
  std::vector<double> nll;      // (N) -log p(tokens[i])
  double decode_s = 0.0;        // decode steps only (prefill excluded)
  uint32_t compressions = 0;
};

// -log p(tok) and the argmax of (stop-masked) logits.
std::pair<double, int32_t> score(const std::vector<float>& logits, int32_t tok) {
  const auto it = std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float v : logits) sum += std::exp(double(v) - *it);
  return {std::log(sum) + *it - logits[tok], int32_t(it - logits.begin())};
}

enum class Mode { Free, Forced, UntilDivergence };

// One pass over up to o.tokens positions. Free: sample. Forced: feed `ref`. UntilDivergence:
// sample and stop at the first token that differs from `ref`. rkv: the bounding policy.
Pass run(model::Forward& fwd, const model::Model& m, const std::vector<int32_t>& prompt,
         const Options& o, const std::optional<model::RkvParams>& rkv, Mode mode,
         const std::vector<int32_t>* ref) {
  const model::CacheShape s = model::cache_shape(m.config());
  std::unique_ptr<model::AttentionCache> cache;
  std::unique_ptr<model::RkvPolicy> policy;
  if (rkv) {
    cache = std::make_unique<model::RaggedKvCache>(
        s, 0, std::vector<uint32_t>(size_t(s.n_layers) * s.n_kv_heads, 0),
        uint32_t(prompt.size()) + rkv->budget + rkv->buffer);
    policy = std::make_unique<model::RkvPolicy>(*rkv, m.config());
    policy->begin(uint32_t(prompt.size()));
  } else {
    cache = std::make_unique<model::KvCache>(s, uint32_t(prompt.size()) + o.tokens);
  }
  auto* ragged = dynamic_cast<model::RaggedKvCache*>(cache.get());
  const std::vector<int32_t> stops = m.chat().stop_tokens();
  model::Sampler sampler(model::SamplingParams{o.temp, 0, 1.0f, o.seed});
  Pass p;
  std::vector<float> logits = fwd.prefill(*cache, prompt, model::LogitsMode::Last, policy.get());
  if (policy) policy->after_prefill(*ragged);
  const auto t0 = Clock::now();
  for (uint32_t i = 0; i < o.tokens; ++i) {
    for (int32_t st : stops) logits[st] = -std::numeric_limits<float>::infinity();
    const int32_t tok = mode == Mode::Forced ? (*ref)[i] : sampler.sample(logits);
    const auto [nll, top] = score(logits, tok);
    p.tokens.push_back(tok);
    p.nll.push_back(nll);
    p.argmax.push_back(top);
    if (i + 1 == o.tokens || (mode == Mode::UntilDivergence && tok != (*ref)[i])) break;
    logits = fwd.decode(*cache, tok, policy.get());
    if (policy) policy->after_decode(*ragged);
  }
  p.decode_s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (policy) p.compressions = policy->compressions();
  return p;
}

// Position of the first token predicted from an evicted cache: the first check (every buffer
// decodes) with more than budget generated rows. Earlier positions are equal under every policy.
size_t first_eviction(uint32_t budget, const Options& o) {
  return std::min<size_t>((budget / o.buffer + 1) * size_t(o.buffer), o.tokens - 1);
}

double ppl(const std::vector<double>& nll, size_t from) {
  double s = 0.0;
  for (size_t i = from; i < nll.size(); ++i) s += nll[i];
  return std::exp(s / double(nll.size() - from));
}

double agree(const std::vector<int32_t>& a, const std::vector<int32_t>& b, size_t from) {
  size_t same = 0;
  for (size_t i = from; i < a.size(); ++i) same += a[i] == b[i];
  return double(same) / double(a.size() - from);
}

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--threads") o.threads = std::atoi(v.c_str());
    else if (k == "--tokens") o.tokens = std::atoi(v.c_str());
    else if (k == "--buffer") o.buffer = std::atoi(v.c_str());
    else if (k == "--seed") o.seed = std::strtoull(v.c_str(), nullptr, 10);
    else if (k == "--temp") o.temp = std::strtof(v.c_str(), nullptr);
    else if (k == "--budget") {
      o.budgets.clear();
      std::stringstream ss(v);
      for (std::string b; std::getline(ss, b, ',');) o.budgets.push_back(std::atoi(b.c_str()));
    } else {
      std::fprintf(stderr, "bench_rkv: unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    model::LoadOptions lo;
    lo.threads = o.threads;
    auto model = model::Model::load(model::resolve_model_path(""), lo);
    model::ForwardOptions fo;
    fo.threads = o.threads;
    model::Forward fwd(model->weights(), fo);
    const std::vector<int32_t> prompt = model->chat().chat(
        "",
        "Write a very long adventure story about a lighthouse keeper who finds a map to a "
        "hidden island. Describe every day of the journey in detail.");
    std::printf(
        "model %s, threads %u, prompt %zu tokens, %u generated tokens, temperature %.2f "
        "seed %llu, buffer %u, window 8, lambda 0.1\n",
        model->path().c_str(), o.threads, prompt.size(), o.tokens, o.temp,
        static_cast<unsigned long long>(o.seed), o.buffer);
    const Pass full = run(fwd, *model, prompt, o, std::nullopt, Mode::Free, nullptr);
    const double full_tps = (o.tokens - 1) / full.decode_s;
    std::printf("\n%-18s %7s %8s %9s %9s %8s %8s %7s %7s\n", "policy", "passes", "tok/s", "vs full",
                "same-pfx", "ppl(X)", "ppl>B", "top1", "top1>B");
    std::printf("%-18s %7s %8.1f %9.2f %9u %8.3f %8s %7.3f %7s\n", "full cache", "-", full_tps, 1.0,
                o.tokens, ppl(full.nll, 0), "below", 1.0, "-");
    for (uint32_t budget : o.budgets)
      for (bool streaming : {false, true}) {
        model::RkvParams p;
        p.budget = budget;
        p.buffer = o.buffer;
        p.streaming = streaming;
        const Pass forced = run(fwd, *model, prompt, o, p, Mode::Forced, &full.tokens);
        const Pass freerun = run(fwd, *model, prompt, o, p, Mode::UntilDivergence, &full.tokens);
        const size_t from = first_eviction(budget, o);
        char name[64];
        std::snprintf(name, sizeof name, "%s B=%u", streaming ? "streaming" : "R-KV", budget);
        const double tps = (o.tokens - 1) / forced.decode_s;
        std::printf("%-18s %7u %8.1f %9.2f %9zu %8.3f %8.3f %7.3f %7.3f\n", name,
                    forced.compressions, tps, tps / full_tps,
                    common_prefix(freerun.tokens, full.tokens), ppl(forced.nll, 0),
                    ppl(forced.nll, from), agree(forced.argmax, full.argmax, 0),
                    agree(forced.argmax, full.argmax, from));
        std::fflush(stdout);
      }
    for (uint32_t budget : o.budgets)
      std::printf("\nfull cache, B=%u: ppl(X) over positions >= %zu (ppl>B column) %.3f", budget,
                  first_eviction(budget, o), ppl(full.nll, first_eviction(budget, o)));
    std::printf("\n");
    std::printf(
        "columns: decode tokens/s (full: its sampling run; bounded: the teacher-forced "
        "run, the same work per token); tokens equal to the full run before the first "
        "divergence when sampling with the same seed; teacher-forced perplexity of the full run's "
        "text X "
        "(all, and from the first eviction on); share "
        "of positions whose argmax equals the full cache's (all, and from the first eviction "
        "on); passes: compression passes that evicted\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_rkv: %s\n", e.what());
    return 1;
  }
  return 0;
}
