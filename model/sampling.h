// Next-token sampling from logits: greedy, temperature, top-k, top-p (nucleus), with a seeded
// std::mt19937_64 so a seed always gives the same tokens on every platform (uniforms are built from
// the raw 64-bit output, not from std distributions). Order of the filters: temperature scales
// the logits, top-k keeps the k largest, top-p keeps the smallest prefix of those (by descending
// probability) whose mass reaches p, then one token is drawn from the renormalised rest.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace kvzip::model {

struct SamplingParams {
  float temperature = 0.0f;  // <= 0: greedy (argmax); otherwise logits are divided by it
  uint32_t top_k = 0;        // 0: off; 1 is greedy
  float top_p = 1.0f;        // in (0, 1]; 1: off
  uint64_t seed = 0;
};

// Index of the largest logit (the first one on ties). Throws Errc::invalid_argument when empty.
int32_t argmax(std::span<const float> logits);

// The candidate set after temperature, top-k and top-p: token ids with their renormalised
// probabilities, in descending probability (ties by lower id). Exposed for tests and diagnostics.
struct Candidate {
  int32_t token;
  double prob;
};
std::vector<Candidate> sampling_candidates(std::span<const float> logits, const SamplingParams& p);

class Sampler {
 public:
  // Throws Errc::invalid_argument for top_p outside (0, 1] or a non-finite temperature.
  explicit Sampler(const SamplingParams& params);
  // Draws the next token. Greedy settings never consume randomness.
  int32_t sample(std::span<const float> logits);
  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
};

}  // namespace kvzip::model
