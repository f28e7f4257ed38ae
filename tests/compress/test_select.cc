// Selection on hand-made scores: the global threshold keeps exactly round(r·N) rows with ties at
// the cut resolved by flat index, per-head keeps ⌊r·n_c⌋ in every head, per-layer keeps a budget
// per layer; the prefix is always kept; eviction copies the chosen rows and their scores.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "compress/selection.h"
#include "tests/support/random_weights.h"
#include "tests/support/thrown.h"

using namespace kvzip;

namespace {

compress::DocumentScores scores_of(uint32_t L, uint32_t H, uint32_t n_p, uint32_t n_c,
                                   std::vector<float> v) {
  compress::DocumentScores s;
  s.shape = model::CacheShape{L, H, 4};
  s.n_prefix = n_p;
  s.n_doc = n_c;
  s.values = std::move(v);
  return s;
}

size_t doc_rows(const compress::Selection& sel, size_t i, uint32_t n_p) {
  return sel.keep[i].size() - n_p;
}

}  // namespace

TEST_CASE("global selection keeps exactly round(r·N) rows, the highest scores", "[compress]") {
  // L=2, H=2, n_c=5: N = 20.
  std::vector<float> v = test::random_vector(20, 3, 0.0f, 1.0f);
  compress::DocumentScores s = scores_of(2, 2, 3, 5, v);
  for (double r : {0.05, 0.3, 0.33, 0.5, 0.97, 1.0}) {
    compress::Selection sel = compress::select_rows(s, r, compress::SelectionLevel::Global);
    const size_t k = static_cast<size_t>(std::llround(r * 20));
    INFO("ratio " << r);
    CHECK(sel.kept_doc == k);
    CHECK(sel.total_doc == 20);
    CHECK(sel.achieved_ratio == Approx(double(k) / 20));
    // Every kept score beats every evicted one.
    float min_kept = 2, max_evicted = -1;
    for (size_t i = 0; i < 4; ++i) {
      const auto& rows = sel.keep[i];
      REQUIRE(rows.size() >= 3);
      for (uint32_t p = 0; p < 3; ++p) REQUIRE(rows[p] == p);  // the prefix, always
      std::vector<bool> kept(5, false);
      for (size_t x = 3; x < rows.size(); ++x) {
        REQUIRE(rows[x] > rows[x - 1]);
        kept[rows[x] - 3] = true;
      }
      for (uint32_t j = 0; j < 5; ++j) {
        if (kept[j]) min_kept = std::min(min_kept, v[i * 5 + j]);
        else max_evicted = std::max(max_evicted, v[i * 5 + j]);
      }
    }
    if (k > 0 && k < 20) CHECK(min_kept > max_evicted);
  }
}

TEST_CASE("ties at the global cut are kept by lower (layer, head, position) first", "[compress]") {
  // All equal: the budget goes to the first flat indices.
  compress::DocumentScores s = scores_of(2, 1, 0, 4, std::vector<float>(8, 0.5f));
  compress::Selection sel = compress::select_rows(s, 0.5, compress::SelectionLevel::Global);
  CHECK(sel.kept_doc == 4);
  CHECK(sel.keep[0] == std::vector<uint32_t>{0, 1, 2, 3});
  CHECK(sel.keep[1].empty());
  // A tie straddling the cut: 0.9 is kept, two of the three 0.5s.
  s = scores_of(1, 1, 1, 5, {0.5f, 0.1f, 0.9f, 0.5f, 0.5f});
  sel = compress::select_rows(s, 0.6, compress::SelectionLevel::Global);
  CHECK(sel.keep[0] == std::vector<uint32_t>{0, 1, 3, 4});  // prefix row 0, doc rows 0, 2, 3
}

TEST_CASE("per-head selection keeps floor(r·n_c) rows in every head", "[compress]") {
  std::vector<float> v = test::random_vector(3 * 2 * 10, 4, 0.0f, 1.0f);
  compress::DocumentScores s = scores_of(3, 2, 2, 10, v);
  for (double r : {0.1, 0.29, 0.35, 0.99}) {
    compress::Selection sel = compress::select_rows(s, r, compress::SelectionLevel::PerHead);
    const size_t k = static_cast<size_t>(std::floor(r * 10 + 1e-9));
    INFO("ratio " << r);
    for (size_t i = 0; i < 6; ++i) {
      REQUIRE(doc_rows(sel, i, 2) == k);
      // The kept rows are that head's top k.
      std::vector<float> head(v.begin() + i * 10, v.begin() + (i + 1) * 10), sorted = head;
      std::sort(sorted.rbegin(), sorted.rend());
      for (size_t x = 2; x < sel.keep[i].size(); ++x)
        CHECK(head[sel.keep[i][x] - 2] >= sorted[k - 1]);
    }
    CHECK(sel.kept_doc == 6 * k);
  }
}

TEST_CASE("per-layer selection gives each layer the same budget, unevenly over its heads",
          "[compress]") {
  // Layer 0: head 0 scores high, head 1 low. Layer 1: the reverse.
  std::vector<float> v;
  for (float base : {0.9f, 0.1f, 0.1f, 0.9f})
    for (int j = 0; j < 4; ++j) v.push_back(base + 0.01f * j);
  compress::DocumentScores s = scores_of(2, 2, 0, 4, v);
  compress::Selection sel = compress::select_rows(s, 0.5, compress::SelectionLevel::PerLayer);
  CHECK(sel.keep[0].size() == 4);
  CHECK(sel.keep[1].empty());
  CHECK(sel.keep[2].empty());
  CHECK(sel.keep[3].size() == 4);
  // Global on the same scores keeps the 8 best anywhere: the same rows here.
  CHECK(compress::select_rows(s, 0.5, compress::SelectionLevel::Global).keep == sel.keep);
}

TEST_CASE("selection rejects bad ratios, NaN scores and unknown levels", "[compress]") {
  compress::DocumentScores s = scores_of(1, 1, 0, 4, {0.1f, 0.2f, 0.3f, 0.4f});
  for (double r : {0.0, -0.1, 1.0000001, 2.0, std::nan("")}) {
    INFO("ratio " << r);
    const Error e = test::error_from(
        [&] { compress::select_rows(s, r, compress::SelectionLevel::Global); }, "no error");
    CHECK(e.code() == Errc::invalid_argument);
    CHECK(std::string(e.what()).find("(0, 1]") != std::string::npos);
  }
  s.values[2] = std::nanf("");
  CHECK_THROWS_AS(compress::select_rows(s, 0.5, compress::SelectionLevel::Global), Error);
  CHECK(compress::parse_selection_level("per-head") == compress::SelectionLevel::PerHead);
  CHECK(std::string(compress::selection_level_name(compress::SelectionLevel::PerLayer)) ==
        "per-layer");
  const Error e2 = test::error_from([&] { compress::parse_selection_level("layer"); }, "no error");
  CHECK(e2.code() == Errc::invalid_argument);
  CHECK(std::string(e2.what()).find("global, per-head, per-layer") != std::string::npos);
}

TEST_CASE("eviction copies the kept rows, their positions and their scores", "[compress]") {
  const model::CacheShape shape{2, 2, 4};
  model::KvCache dense(shape);
  const uint32_t T = 6;  // prefix 2 + document 4
  dense.reserve_append(T);
  auto k = test::random_vector(T * 2 * 4, 5), v = test::random_vector(T * 2 * 4, 6);
  for (uint32_t l = 0; l < 2; ++l) dense.append(l, k.data(), v.data(), T);
  dense.commit_append(T);
  std::vector<float> sc = test::random_vector(2 * 2 * 4, 7, 0.0f, 1.0f);
  compress::DocumentScores s = scores_of(2, 2, 2, 4, sc);
  s.shape = shape;
  compress::Selection sel = compress::select_rows(s, 0.5, compress::SelectionLevel::PerHead);
  compress::EvictResult ev = compress::evict(dense, s, sel, 8);
  CHECK(ev.cache.logical_length() == 6);
  CHECK(ev.achieved_ratio == 0.5);
  for (uint32_t l = 0; l < 2; ++l) {
    REQUIRE(ev.kept_scores[l].size() == 2 * 4);  // per head: 2 prefix + 2 document rows
    size_t r = 0;
    for (uint32_t h = 0; h < 2; ++h) {
      const auto& rows = sel.keep[l * 2 + h];
      REQUIRE(ev.cache.kept(l, h) == rows.size());
      model::KvHeadView view = ev.cache.view(l, h);
      for (size_t x = 0; x < rows.size(); ++x, ++r) {
        CHECK(view.positions[x] == rows[x]);
        for (uint32_t d = 0; d < 4; ++d)
          CHECK(view.k[x * 4 + d] == k[(size_t(rows[x]) * 2 + h) * 4 + d]);
        if (rows[x] < 2) CHECK(std::isinf(ev.kept_scores[l][r]));
        else CHECK(ev.kept_scores[l][r] == s.at(l, h, rows[x] - 2));
      }
    }
  }
}

TEST_CASE("scorer options are set by name and bad names or values are refused", "[compress]") {
  using Catch::Matchers::Contains;
  compress::ScorerOptions o;
  compress::set_scorer_option(o, "snapkv-window=64");
  compress::set_scorer_option(o, "restkv-alpha", "0.5");
  compress::set_scorer_option(o, "rkv-lambda=0.25");
  compress::set_scorer_option(o, "seed=18446744073709551615");
  compress::set_scorer_option(o, "chunk", "512");
  CHECK(o.snapkv_window == 64);
  CHECK(o.restkv_alpha == 0.5f);
  CHECK(o.rkv_lambda == 0.25f);
  CHECK(o.seed == UINT64_MAX);
  CHECK(o.kvzip_chunk == 512);
  CHECK(o.rkv_window == 8);  // untouched fields keep their defaults
  // the scorer records what was set
  const compress::MethodParams p = compress::make_scorer("snapkv", o)->params();
  CHECK(std::find(p.begin(), p.end(), std::pair<std::string, std::string>{"window", "64"}) !=
        p.end());

  CHECK_THROWS_WITH(compress::set_scorer_option(o, "window=3"),
                    Contains("unknown scorer option 'window'") && Contains("snapkv-window"));
  CHECK_THROWS_WITH(compress::set_scorer_option(o, "snapkv-window"), Contains("not KEY=VALUE"));
  CHECK_THROWS_WITH(compress::set_scorer_option(o, "snapkv-window=7x"), Contains("whole number"));
  CHECK_THROWS_WITH(compress::set_scorer_option(o, "snapkv-window=-1"), Contains("whole number"));
  CHECK_THROWS_WITH(compress::set_scorer_option(o, "sink=99999999999"), Contains("whole number"));
  CHECK_THROWS_WITH(compress::set_scorer_option(o, "rkv-lambda=nan"), Contains("finite number"));
  CHECK_THROWS_WITH(compress::set_scorer_option(o, "rkv-lambda="), Contains("finite number"));
  CHECK(o.snapkv_window == 64);  // a refused value leaves the field as it was
}
