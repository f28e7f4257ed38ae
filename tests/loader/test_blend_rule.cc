// Which tokens each blend rule recomputes (loader/compose.h select_recomputed), against a plain
// reference that takes the largest change one token at a time: deviation takes the largest layer-1
// value changes (ties to the earlier token), sink the first tokens, sink-deviation the first half
// of the budget (rounded up) and the largest changes after it; the names parse both ways and an
// unknown one is refused naming the rules.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <set>

#include "common/error.h"
#include "loader/compose.h"
#include "tests/support/thrown.h"

using namespace kvzip;
using loader::BlendRule;

namespace {

// `pick` times: the untaken index in [from, n) with the largest change, the first one on ties.
std::set<uint32_t> largest(const std::vector<double>& change, uint32_t from, uint32_t pick,
                           std::set<uint32_t> taken) {
  for (uint32_t k = 0; k < pick; ++k) {
    int64_t best = -1;
    for (uint32_t i = from; i < change.size(); ++i)
      if (!taken.count(i) && (best < 0 || change[i] > change[size_t(best)])) best = i;
    taken.insert(static_cast<uint32_t>(best));
  }
  return taken;
}

std::vector<uint32_t> reference(BlendRule rule, const std::vector<double>& change, uint32_t pick) {
  uint32_t sinks = 0;
  if (rule == BlendRule::sink) sinks = pick;
  if (rule == BlendRule::sink_deviation) sinks = pick - pick / 2;
  std::set<uint32_t> first;
  for (uint32_t i = 0; i < sinks; ++i) first.insert(i);
  const std::set<uint32_t> all = largest(change, sinks, pick - sinks, first);
  return {all.begin(), all.end()};
}

}  // namespace

TEST_CASE("each blend rule picks the tokens of its plain reference", "[loader][compose]") {
  std::mt19937 rng(7);
  for (BlendRule rule : {BlendRule::deviation, BlendRule::sink, BlendRule::sink_deviation})
    for (uint32_t n : {1u, 2u, 7u, 40u, 129u}) {
      std::vector<double> change(n);
      // Few distinct values: many ties, which go to the earlier token.
      for (double& c : change) c = double(rng() % 5);
      for (uint32_t pick : {0u, 1u, n / 3, n / 2 + 1, n}) {
        if (pick > n) continue;
        INFO(loader::blend_rule_name(rule) << " n " << n << " pick " << pick);
        const std::vector<uint32_t> got = loader::select_recomputed(rule, change, n, pick);
        CHECK(got == reference(rule, change, pick));
      }
    }
}

TEST_CASE("blend rules on a known document", "[loader][compose]") {
  const std::vector<double> change = {0, 9, 1, 9, 0, 5, 8, 0};
  using V = std::vector<uint32_t>;
  CHECK(loader::select_recomputed(BlendRule::deviation, change, 8, 3) == V{1, 3, 6});
  CHECK(loader::select_recomputed(BlendRule::sink, {}, 8, 3) == V{0, 1, 2});
  // Two first tokens, then the largest change after them: 3 (9), ahead of 6 (8).
  CHECK(loader::select_recomputed(BlendRule::sink_deviation, change, 8, 3) == V{0, 1, 3});
  CHECK(loader::select_recomputed(BlendRule::sink_deviation, change, 8, 4) == V{0, 1, 3, 6});
  CHECK(test::throws_code([&] { loader::select_recomputed(BlendRule::sink, {}, 8, 9); },
                          Errc::invalid_argument));
}

TEST_CASE("blend rule names parse both ways; an unknown one names the rules", "[loader][compose]") {
  for (BlendRule rule : {BlendRule::deviation, BlendRule::sink, BlendRule::sink_deviation})
    CHECK(loader::parse_blend_rule(loader::blend_rule_name(rule)) == rule);
  CHECK(loader::ComposeOptions{}.rule == BlendRule::deviation);
  const Error e = test::error_from([] { loader::parse_blend_rule("first"); });
  CHECK(e.code() == Errc::invalid_argument);
  CHECK_THAT(e.what(), Catch::Matchers::Contains("sink-deviation"));
}
