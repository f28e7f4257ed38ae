// Head-level KVzip (compress/head_level.h): selection against a reference written plainly here
// (heads sorted by hand, expected row lists built by hand) including ties, windows and ratio
// rounding; calibration equals the max over positions of the kvzip scorer's own scores; the
// head-level pipeline keeps exactly the dense cache's rows it selected, records what it did,
// equals the full cache at ratio 1, and refuses bad head scores before any model work.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "common/error.h"
#include "compress/head_level.h"
#include "compress/pipeline.h"
#include "model/prefill.h"
#include "tests/compress/support.h"
#include "tests/support/random_weights.h"

using namespace kvzip;

namespace {

// Scores (L=3, Hkv=2, n_c) with the given per-head maxima placed at varying positions and
// smaller values elsewhere.
compress::DocumentScores scores_with_maxima(const std::vector<float>& maxima, uint32_t n_p,
                                            uint32_t n_c) {
  compress::DocumentScores s;
  s.shape = model::CacheShape{3, 2, 16};
  s.n_prefix = n_p;
  s.n_doc = n_c;
  const std::vector<float> noise = test::random_vector(6 * n_c, 5, 0.0f, 0.5f);
  s.values.resize(6 * n_c);
  for (size_t i = 0; i < 6; ++i)
    for (size_t j = 0; j < n_c; ++j)
      s.values[i * n_c + j] =
          j == (i * 3) % n_c ? maxima[i] : std::min(noise[i * n_c + j], maxima[i]);
  return s;
}

// The reference: rank heads (score descending, index ascending) by hand, keep the first k whole.
std::vector<std::vector<uint32_t>> naive_keep(const std::vector<float>& maxima, uint32_t n_p,
                                              uint32_t n_c, size_t k, uint32_t window) {
  std::vector<std::pair<float, size_t>> ranked;
  for (size_t i = 0; i < maxima.size(); ++i) ranked.push_back({-maxima[i], i});
  std::sort(ranked.begin(), ranked.end());
  std::vector<bool> whole(maxima.size(), false);
  for (size_t i = 0; i < k; ++i) whole[ranked[i].second] = true;
  std::vector<std::vector<uint32_t>> keep(maxima.size());
  for (size_t i = 0; i < maxima.size(); ++i) {
    for (uint32_t r = 0; r < n_p; ++r) keep[i].push_back(r);
    for (uint32_t j = 0; j < n_c; ++j)
      if (whole[i] || j + window >= n_c) keep[i].push_back(n_p + j);
  }
  return keep;
}

struct Doc : test::TinyDoc {
  Doc() : TinyDoc(5, 36, 7, 61) {}
};

// compress() options of method kvzip-head with room for a 16-token question.
compress::CompressOptions head_level(std::vector<float> head_scores, double ratio,
                                     uint32_t window = 0) {
  compress::CompressOptions o;
  o.method = compress::kHeadLevelMethod;
  o.ratio = ratio;
  o.head.head_scores = std::move(head_scores);
  o.head.window = window;
  o.prefill.answer_room = 16;
  return o;
}

}  // namespace

TEST_CASE("head-level selection keeps whole the heads a hand ranking puts on top", "[compress]") {
  // Two ties (0.6 twice, 0.2 twice) so the cut falls on a tie for some ratios.
  const std::vector<float> maxima = {0.2f, 0.9f, 0.6f, 0.2f, 0.6f, 0.4f};
  const uint32_t n_p = 3, n_c = 10;
  const compress::DocumentScores s = scores_with_maxima(maxima, n_p, n_c);
  REQUIRE(compress::max_per_head(s) == maxima);
  for (double r : {0.1, 0.2, 0.34, 0.5, 0.6, 0.75, 1.0})
    for (uint32_t window : {0u, 1u, 4u, 10u, 50u}) {
      INFO("ratio " << r << " window " << window);
      const size_t k = static_cast<size_t>(std::llround(r * 6));
      CHECK(compress::heads_kept(r, 6) == k);
      const compress::Selection sel = compress::select_heads(s, r, window);
      CHECK(sel.keep == naive_keep(maxima, n_p, n_c, k, window));
      const uint64_t kept = k * n_c + (6 - k) * std::min(window, n_c);
      CHECK(sel.kept_doc == kept);
      CHECK(sel.total_doc == 60);
      CHECK(sel.achieved_ratio == Approx(double(kept) / 60.0));
    }
  // With window 0 the achieved row ratio is the kept head fraction.
  CHECK(compress::select_heads(s, 0.5, 0).achieved_ratio == 0.5);
  // Tie at the cut: 0.6 at heads 2 and 4, k = 2 keeps 1 (0.9) and the lower index 2.
  const compress::Selection two = compress::select_heads(s, 2.0 / 6.0, 0);
  for (size_t i = 0; i < 6; ++i) CHECK((two.keep[i].size() == n_p + n_c) == (i == 1 || i == 2));
}

TEST_CASE("head-level selection refuses bad ratios and NaN scores", "[compress]") {
  compress::DocumentScores s = scores_with_maxima({1, 2, 3, 4, 5, 6}, 2, 4);
  for (double r : {0.0, -0.5, 1.01, std::nan("")})
    CHECK_THROWS_AS(compress::select_heads(s, r, 0), Error);
  s.values[5] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_AS(compress::select_heads(s, 0.5, 0), Error);
  s.values.pop_back();
  CHECK_THROWS_AS(compress::max_per_head(s), Error);
}

TEST_CASE("broadcast head scores give every row its head's score and reduce back", "[compress]") {
  const std::vector<float> h = {0.5f, 0.25f, 1.0f, 0.0f};
  const compress::DocumentScores s =
      compress::broadcast_head_scores(h, model::CacheShape{2, 2, 8}, 3, 5);
  CHECK(s.n_prefix == 3);
  CHECK(s.n_doc == 5);
  REQUIRE(s.values.size() == 20);
  for (uint32_t l = 0; l < 2; ++l)
    for (uint32_t k = 0; k < 2; ++k)
      for (uint32_t j = 0; j < 5; ++j) CHECK(s.at(l, k, j) == h[l * 2 + k]);
  CHECK(compress::max_per_head(s) == h);
  CHECK_THROWS_AS(compress::broadcast_head_scores(h, model::CacheShape{3, 2, 8}, 3, 5), Error);
}

TEST_CASE("calibration scores each head by the max of its KVzip scores over the document",
          "[compress]") {
  const bool qwen = GENERATE(true, false);
  const ModelConfig cfg = qwen ? test::tiny_qwen2_config() : test::tiny_llama_config();
  const model::Weights w = test::random_weights(cfg, 71);
  const std::vector<int32_t> prefix = test::random_tokens(6, cfg.vocab_size, 72);
  const std::vector<int32_t> doc = test::random_tokens(40, cfg.vocab_size, 73);
  const compress::ScorerOptions so = test::tiny_kvzip_options();
  model::Forward fwd(w, model::ForwardOptions{2, 8, {}});

  const compress::CalibrateResult got = compress::calibrate_heads(fwd, prefix, doc, so);
  CHECK(got.n_prefix == 6);
  CHECK(got.n_doc == 40);
  CHECK(got.shape == model::cache_shape(cfg));

  prefill::PrefillResult pre = prefill::prefill_document(fwd, prefix, doc);
  const compress::DocumentScores direct =
      compress::make_scorer("kvzip", so)->score(compress::ScoreInput{&fwd, &pre.cache, 6, doc});
  REQUIRE(got.head_scores.size() == size_t(cfg.n_layers) * cfg.n_kv_heads);
  for (uint32_t l = 0; l < cfg.n_layers; ++l)
    for (uint32_t h = 0; h < cfg.n_kv_heads; ++h) {
      float mx = -1.0f;
      for (uint32_t j = 0; j < 40; ++j) mx = std::max(mx, direct.at(l, h, j));
      CHECK(got.head_scores[l * cfg.n_kv_heads + h] == mx);
      CHECK((mx > 0.0f && mx <= 1.0f));
    }
  CHECK_THROWS_AS(compress::calibrate_heads(fwd, prefix, std::vector<int32_t>{}, so), Error);
}

TEST_CASE("head-level compression keeps the dense rows of the selected heads and records it",
          "[compress]") {
  Doc d;
  model::Forward fwd(d.w, model::ForwardOptions{2, 8, {}});
  compress::CompressOptions ho =
      head_level({0.1f, 0.7f, 0.3f, 0.9f}, 0.5, 4);  // heads 3 and 1 whole
  ho.head.source = {{"head_scores", "x.kvh"}};
  const compress::CompressResult r = compress::compress(fwd, d.prefix, d.doc, ho);
  CHECK(r.method == "kvzip-head");
  CHECK(r.requested_ratio == 0.5);
  CHECK(r.achieved_ratio == Approx((2.0 * 36 + 2.0 * 4) / (4.0 * 36)));
  CHECK(r.scoring_s == 0.0);
  CHECK(r.params == compress::MethodParams{{"level", "head"},
                                           {"head_ratio", "0.5"},
                                           {"heads_kept", "2/4"},
                                           {"window", "4"},
                                           {"doc_ratio", "0.555556"},
                                           {"head_scores", "x.kvh"}});

  prefill::PrefillResult dense = prefill::prefill_document(fwd, d.prefix, d.doc, ho.prefill);
  const uint32_t D = d.cfg.head_dim;
  for (uint32_t l = 0; l < d.cfg.n_layers; ++l) {
    size_t row = 0;
    for (uint32_t h = 0; h < d.cfg.n_kv_heads; ++h) {
      const uint32_t i = l * d.cfg.n_kv_heads + h;
      const bool whole = i == 1 || i == 3;
      INFO("layer " << l << " head " << h);
      REQUIRE(r.cache.kept(l, h) == 5 + (whole ? 36u : 4u));
      const model::KvHeadView dv = dense.cache.view(l, h);
      const uint32_t* pos = r.cache.positions(l, h);
      for (uint32_t x = 0; x < r.cache.kept(l, h); ++x, ++row) {
        const uint32_t want = x < 5 ? x : (whole ? x : 41 - 4 + (x - 5));
        CHECK(pos[x] == want);
        CHECK(std::equal(r.cache.k_rows(l, h) + size_t(x) * D,
                         r.cache.k_rows(l, h) + size_t(x + 1) * D, dv.k + size_t(want) * D));
        CHECK(r.kept_scores[l][row] ==
              (want < 5 ? std::numeric_limits<float>::infinity() : ho.head.head_scores[i]));
      }
    }
  }
}

TEST_CASE("head-level compression at ratio 1 answers exactly as the full cache", "[compress]") {
  Doc d;
  model::Forward fwd(d.w, model::ForwardOptions{2, 8, {}});
  const compress::CompressOptions ho = head_level({0.1f, 0.7f, 0.3f, 0.9f}, 1.0);
  compress::CompressResult r = compress::compress(fwd, d.prefix, d.doc, ho);
  CHECK(r.achieved_ratio == 1.0);
  prefill::PrefillResult dense = prefill::prefill_document(fwd, d.prefix, d.doc, ho.prefill);
  CHECK(fwd.prefill(r.cache, d.question, model::LogitsMode::All) ==
        fwd.prefill(dense.cache, d.question, model::LogitsMode::All));
}

TEST_CASE("head-level compression refuses bad head scores and ratios before any work",
          "[compress]") {
  Doc d;
  model::Forward fwd(d.w, model::ForwardOptions{1, 64, {}});
  compress::CompressOptions ho = head_level({}, 0.6);
  auto code = [&]() {
    try {
      compress::compress(fwd, d.prefix, d.doc, ho);
    } catch (const Error& e) {
      return e.code();
    }
    return Errc::internal;
  };
  CHECK(code() == Errc::invalid_argument);   // no head scores at all
  ho.head.head_scores = {0.1f, 0.2f, 0.3f};  // the model has 4 heads
  CHECK(code() == Errc::invalid_argument);
  ho.head.head_scores = {0.1f, std::nanf(""), 0.3f, 0.4f};
  CHECK(code() == Errc::invalid_argument);
  ho.head.head_scores = {0.1f, 0.2f, 0.3f, 0.4f};
  ho.ratio = 0.0;
  CHECK(code() == Errc::invalid_argument);
}

TEST_CASE("the head-level scorer broadcasts its head scores over the prefilled document",
          "[compress]") {
  Doc d;
  model::Forward fwd(d.w, model::ForwardOptions{1, 64, {}});
  prefill::PrefillResult pre = prefill::prefill_document(fwd, d.prefix, d.doc);
  auto scorer = compress::make_head_level_scorer({0.4f, 0.3f, 0.2f, 0.1f});
  CHECK(scorer->name() == "kvzip-head");
  const compress::DocumentScores s =
      scorer->score(compress::ScoreInput{&fwd, &pre.cache, 5, d.doc});
  CHECK(compress::max_per_head(s) == std::vector<float>{0.4f, 0.3f, 0.2f, 0.1f});
  CHECK(s.at(1, 0, 35) == 0.2f);
  auto wrong = compress::make_head_level_scorer({0.4f, 0.3f});
  CHECK_THROWS_AS(wrong->score(compress::ScoreInput{&fwd, &pre.cache, 5, d.doc}), Error);
}
