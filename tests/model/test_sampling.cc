// Sampling on fixed logits: greedy equivalences, the top-k / top-p candidate sets, determinism
// for a seed, and draw frequencies close to the softmax probabilities.
#include <catch2/catch.hpp>

#include <cmath>

#include "common/error.h"
#include "model/sampling.h"

using namespace kvzip;

namespace {
const std::vector<float> kLogits = {1.0f, 3.0f, 0.5f, 2.0f, -1.0f};  // order: 1, 3, 0, 2, 4
}

TEST_CASE("greedy, top-k = 1 and temperature 0 all pick the argmax", "[model][sampling]") {
  CHECK(model::argmax(kLogits) == 1);
  CHECK(model::Sampler(model::SamplingParams{0.0f, 0, 1.0f, 1}).sample(kLogits) == 1);
  CHECK(model::Sampler(model::SamplingParams{1.5f, 1, 1.0f, 2}).sample(kLogits) == 1);
  for (uint64_t seed = 0; seed < 20; ++seed)
    CHECK(model::Sampler(model::SamplingParams{0.8f, 1, 0.9f, seed}).sample(kLogits) == 1);
}

TEST_CASE("argmax takes the first of equal maxima", "[model][sampling]") {
  std::vector<float> tie = {0.0f, 2.0f, 2.0f};
  CHECK(model::argmax(tie) == 1);
}

TEST_CASE("top-k keeps the k largest logits with renormalised probabilities", "[model][sampling]") {
  auto c = model::sampling_candidates(kLogits, model::SamplingParams{1.0f, 3, 1.0f, 0});
  REQUIRE(c.size() == 3);
  CHECK(c[0].token == 1);
  CHECK(c[1].token == 3);
  CHECK(c[2].token == 0);
  double z = std::exp(3.0) + std::exp(2.0) + std::exp(1.0);
  CHECK(c[0].prob == Approx(std::exp(3.0) / z));
  CHECK(c[2].prob == Approx(std::exp(1.0) / z));
}

TEST_CASE("top-p keeps the smallest prefix whose mass reaches p", "[model][sampling]") {
  // Softmax of kLogits: p1 ≈ 0.624, p3 ≈ 0.229, p0 ≈ 0.084, p2 ≈ 0.051, p4 ≈ 0.011.
  auto c = model::sampling_candidates(kLogits, model::SamplingParams{1.0f, 0, 0.8f, 0});
  REQUIRE(c.size() == 2);  // 0.624 < 0.8 <= 0.853
  CHECK(c[0].token == 1);
  CHECK(c[1].token == 3);
  CHECK(c[0].prob + c[1].prob == Approx(1.0));
  auto c2 = model::sampling_candidates(
      kLogits, model::SamplingParams{1.0f, 0, 0.86f, 0});  // 0.853 < 0.86 <= 0.937
  CHECK(c2.size() == 3);
  auto c3 = model::sampling_candidates(kLogits, model::SamplingParams{1.0f, 0, 0.5f, 0});
  CHECK(c3.size() == 1);
}

TEST_CASE("temperature sharpens or flattens the distribution", "[model][sampling]") {
  auto cold = model::sampling_candidates(kLogits, model::SamplingParams{0.5f, 0, 1.0f, 0});
  auto hot = model::sampling_candidates(kLogits, model::SamplingParams{2.0f, 0, 1.0f, 0});
  CHECK(cold[0].prob > 0.8);
  CHECK(hot[0].prob < 0.5);
  CHECK(cold[0].prob == Approx(std::exp(6.0) / (std::exp(2.0) + std::exp(6.0) + std::exp(1.0) +
                                                std::exp(4.0) + std::exp(-2.0))));
}

TEST_CASE("the same seed gives the same draws, another seed different ones", "[model][sampling]") {
  model::SamplingParams p{1.0f, 0, 1.0f, 42};
  model::Sampler a(p), b(p), c(model::SamplingParams{1.0f, 0, 1.0f, 43});
  std::vector<int32_t> da, db, dc;
  for (int i = 0; i < 200; ++i) {
    da.push_back(a.sample(kLogits));
    db.push_back(b.sample(kLogits));
    dc.push_back(c.sample(kLogits));
  }
  CHECK(da == db);
  CHECK(da != dc);
}

TEST_CASE("draw frequencies follow the softmax probabilities", "[model][sampling]") {
  model::Sampler s(model::SamplingParams{1.0f, 0, 1.0f, 7});
  auto want = model::sampling_candidates(kLogits, s.params());
  std::vector<int> count(kLogits.size(), 0);
  const int n = 20000;
  for (int i = 0; i < n; ++i) count[s.sample(kLogits)]++;
  for (const auto& c : want) {
    double freq = double(count[c.token]) / n;
    double sigma = std::sqrt(c.prob * (1 - c.prob) / n);
    INFO("token " << c.token << " p=" << c.prob << " freq=" << freq);
    CHECK(std::fabs(freq - c.prob) < 5 * sigma + 1e-4);
  }
}

TEST_CASE("top-p sampling never draws outside the nucleus", "[model][sampling]") {
  model::Sampler s(model::SamplingParams{1.0f, 0, 0.8f, 9});
  for (int i = 0; i < 2000; ++i) {
    int32_t t = s.sample(kLogits);
    REQUIRE((t == 1 || t == 3));
  }
}

TEST_CASE("sampling rejects bad parameters and NaN logits", "[model][sampling]") {
  CHECK_THROWS_AS(model::Sampler(model::SamplingParams{1.0f, 0, 0.0f, 0}), Error);
  CHECK_THROWS_AS(model::Sampler(model::SamplingParams{1.0f, 0, 1.5f, 0}), Error);
  std::vector<float> nan = {0.0f, NAN};
  CHECK_THROWS_AS(model::argmax(nan), Error);
  CHECK_THROWS_AS(model::argmax(std::vector<float>{}), Error);
}
