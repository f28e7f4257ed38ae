// Sampling (see sampling.h). Probabilities are computed in double from max-subtracted logits;
// NaN logits are rejected rather than silently propagated into the draw.
#include "model/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "common/error.h"

namespace kvzip::model {
namespace {

bool greedy(const SamplingParams& p) { return p.temperature <= 0.0f || p.top_k == 1; }

void check_logits(std::span<const float> logits) {
  if (logits.empty())
    throw Error(Errc::invalid_argument, "sampling: empty logits (vocabulary size 0)");
  for (size_t i = 0; i < logits.size(); ++i)
    if (std::isnan(logits[i]))
      throw Error(Errc::invalid_argument, "sampling: logit " + std::to_string(i) +
                                              " is NaN; the forward pass produced invalid values");
}

}  // namespace

int32_t argmax(std::span<const float> logits) {
  check_logits(logits);
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

std::vector<Candidate> sampling_candidates(std::span<const float> logits, const SamplingParams& p) {
  check_logits(logits);
  if (greedy(p)) return {Candidate{argmax(logits), 1.0}};
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  size_t keep = logits.size();
  if (p.top_k > 0 && p.top_k < keep) keep = p.top_k;
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  std::partial_sort(order.begin(), order.begin() + keep, order.end(), by_logit);
  order.resize(keep);

  const double mx = logits[order[0]], inv_t = 1.0 / p.temperature;
  if (!std::isfinite(mx))
    throw Error(Errc::invalid_argument, "sampling: the largest logit is " + std::to_string(mx) +
                                            ", expected a finite value");
  std::vector<Candidate> c(keep);
  double total = 0;
  for (size_t i = 0; i < keep; ++i) {
    c[i] = Candidate{order[i], std::exp((double(logits[order[i]]) - mx) * inv_t)};
    total += c[i].prob;
  }
  for (auto& x : c) x.prob /= total;
  if (p.top_p < 1.0f) {
    double mass = 0;
    size_t n = 0;
    while (n < c.size() && mass < p.top_p) mass += c[n++].prob;
    c.resize(n);
    for (auto& x : c) x.prob /= mass;
  }
  return c;
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {
  if (!(params.top_p > 0.0f && params.top_p <= 1.0f))
    throw Error(Errc::invalid_argument, "sampling: top_p is " + std::to_string(params.top_p) +
                                            ", expected a value in (0, 1]");
  if (!std::isfinite(params.temperature))
    throw Error(Errc::invalid_argument, "sampling: temperature is not finite; use 0 for greedy");
}

int32_t Sampler::sample(std::span<const float> logits) {
  if (greedy(params_)) return argmax(logits);
  std::vector<Candidate> c = sampling_candidates(logits, params_);
  double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;  // [0, 1)
  for (const auto& x : c) {
    if (u < x.prob) return x.token;
    u -= x.prob;
  }
  return c.back().token;  // rounding left u just above the summed mass
}

}  // namespace kvzip::model
