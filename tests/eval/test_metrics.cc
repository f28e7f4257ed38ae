// SQuAD normalisation, F1 and contains-answer on cases whose values follow the official
// evaluate-v2.0.py (computed by hand), and first-token KL on identical and hand-computed inputs.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "common/error.h"
#include "eval/metrics.h"

using namespace kvzip;
using namespace kvzip::eval;

TEST_CASE("normalisation lowercases, strips punctuation, articles and extra whitespace", "[eval]") {
  CHECK(normalize_answer("The Normans!") == "normans");
  CHECK(normalize_answer("  A  cat, an  apple and THE dog. ") == "cat apple and dog");
  CHECK(normalize_answer("the theatre") == "theatre");  // articles only as whole words
  CHECK(normalize_answer("Rollo's 10th-century duchy") == "rollos 10thcentury duchy");
  CHECK(normalize_answer("\xC3\x89mile \xC3\x97 2") ==
        "\xC3\xA9mile \xC3\x97 2");  // É -> é, × kept
  CHECK(normalize_answer("the") == "");
  CHECK(normalize_answer("tab\tand\nnewline") == "tab and newline");
}

TEST_CASE("F1 of an answer that differs only by an article is 1", "[eval]") {
  CHECK(f1_score("The Normans", "Normans") == 1.0);
  CHECK(f1_score("normans.", "the Normans") == 1.0);
}

TEST_CASE("F1 of partial overlaps matches hand-computed values", "[eval]") {
  // pred tokens: normans came from normandy in france (6); gold: normandy france (2); overlap 2.
  // precision 2/6, recall 1 -> F1 = 2 * (1/3) / (4/3) = 0.5.
  CHECK(f1_score("the Normans came from Normandy in France", "Normandy, France") == Approx(0.5));
  // multiset overlap: x:min(2,1) + y:min(1,2) = 2 of 3 each side -> 2/3.
  CHECK(f1_score("x x y", "x y y") == Approx(2.0 / 3.0));
  // 1 of 2 predicted, 1 of 4 gold: p = 1/2, r = 1/4 -> 2 * (1/8) / (3/4) = 1/3.
  CHECK(f1_score("William Normandy", "William the Conqueror of England") == Approx(1.0 / 3.0));
  CHECK(f1_score("Paris", "France") == 0.0);
}

TEST_CASE("F1 with an empty side is 1 only when both are empty, as in SQuAD v2", "[eval]") {
  CHECK(f1_score("", "") == 1.0);
  CHECK(f1_score("The", "") == 1.0);  // normalises to nothing
  CHECK(f1_score("", "France") == 0.0);
  CHECK(f1_score("France", "") == 0.0);
}

TEST_CASE("answer-to-answer F1 forgives wording and is symmetric", "[eval]") {
  // Exact-string agreement would call each of these pairs different.
  CHECK(answer_f1("Normandy.", "normandy") == 1.0);
  CHECK(answer_f1("The Normans", "Normans") == 1.0);
  // "in 10th century" (3 tokens) vs "10th and 11th centuries" (4): overlap 1 ("10th"):
  // p = 1/3, r = 1/4 -> 2 * (1/12) / (7/12) = 2/7, either way round.
  CHECK(answer_f1("in the 10th century", "10th and 11th centuries") == Approx(2.0 / 7.0));
  CHECK(answer_f1("10th and 11th centuries", "in the 10th century") == Approx(2.0 / 7.0));
  // "Rollo" vs "Rollo, the Viking leader" ("rollo viking leader", 3 tokens): p = 1, r = 1/3 -> 0.5.
  CHECK(answer_f1("Rollo", "Rollo, the Viking leader") == Approx(0.5));
  CHECK(answer_f1("Rollo", "William") == 0.0);
  // Two empty answers agree; an empty answer against a real one does not.
  CHECK(answer_f1("", "") == 1.0);
  CHECK(answer_f1("", "Rollo") == 0.0);
}

TEST_CASE("max F1 takes the best gold answer; no gold answers means the empty answer", "[eval]") {
  CHECK(max_f1("France", {"Paris", "france", "in France"}) == 1.0);
  CHECK(max_f1("in France", {"Paris", "France"}) == Approx(2.0 / 3.0));
  CHECK(max_f1("something", {}) == 0.0);
  CHECK(max_f1("", {}) == 1.0);
}

TEST_CASE("contains-answer finds the normalised gold answer as whole tokens", "[eval]") {
  CHECK(contains_answer("Normandy is located in Normandy, France.", "France"));
  CHECK(contains_answer("It was William the Conqueror.", "William the Conqueror"));
  CHECK(contains_answer("The Normans", "normans"));
  CHECK_FALSE(contains_answer("Frances", "France"));
  CHECK_FALSE(contains_answer("the Norman", "Normans"));
  CHECK_FALSE(contains_answer("France", "Paris France"));
  CHECK(contains_answer("", ""));
  CHECK_FALSE(contains_answer("no", ""));
  CHECK(contains_any("in the 10th century", {"9th century", "10th century"}));
  CHECK_FALSE(contains_any("in the 11th century", {"9th century", "10th century"}));
}

TEST_CASE("KL of identical first-token distributions is exactly 0", "[eval]") {
  const std::vector<float> a = {1.5f, -2.0f, 0.25f, 3.0f, 0.0f};
  CHECK(kl_divergence(a, a) == 0.0);
  std::vector<float> shifted = a;
  for (float& x : shifted) x += 7.0f;  // softmax is shift-invariant
  CHECK(kl_divergence(a, shifted) == Approx(0.0).margin(1e-12));
}

TEST_CASE("KL matches a hand-computed two-token case and is asymmetric", "[eval]") {
  // P = (1/2, 1/2); Q = softmax(0, ln 3) = (1/4, 3/4).
  // KL(P||Q) = 1/2 ln(2) + 1/2 ln(2/3) = 1/2 ln(4/3).
  const std::vector<float> p = {0.0f, 0.0f};
  const std::vector<float> q = {0.0f, static_cast<float>(std::log(3.0))};
  CHECK(kl_divergence(p, q) == Approx(0.5 * std::log(4.0 / 3.0)).epsilon(1e-6));
  // KL(Q||P) = 1/4 ln(1/2) + 3/4 ln(3/2).
  CHECK(kl_divergence(q, p) == Approx(0.25 * std::log(0.5) + 0.75 * std::log(1.5)).epsilon(1e-6));
}

TEST_CASE("KL of distributions over different vocabularies is refused", "[eval]") {
  const std::vector<float> a = {0.0f, 1.0f}, b = {0.0f, 1.0f, 2.0f};
  CHECK_THROWS_AS(kl_divergence(a, b), Error);
  CHECK_THROWS_AS(kl_divergence({}, {}), Error);
}
