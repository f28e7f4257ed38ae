// The compress() pipeline end to end on a tiny model: with ratio 1 the compressed cache answers
// with exactly the logits of the full dense cache; the result records method, parameters, ratios
// and the scores of kept rows; bad ratios, methods and options are refused before any work.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "common/error.h"
#include "compress/pipeline.h"
#include "model/prefill.h"
#include "tests/compress/support.h"
#include "tests/support/random_weights.h"
#include "tests/support/thrown.h"

using namespace kvzip;

namespace {

compress::ScorerOptions tiny_scorer_options() {
  compress::ScorerOptions so = test::tiny_kvzip_options();
  so.snapkv_window = 4;
  so.h2o_recent = 4;
  so.restkv_window = 4;
  so.rkv_window = 4;
  return so;
}

struct Doc : test::TinyDoc {
  Doc() : TinyDoc(6, 40, 9, 41) {}
};

}  // namespace

TEST_CASE("with ratio 1 every method's compressed cache gives the full cache's logits exactly",
          "[compress]") {
  const std::string method =
      GENERATE("kvzip", "full", "random", "streaming", "snapkv", "h2o", "rest-kv", "rkv");
  INFO("method " << method);
  Doc d;
  model::Forward fwd(d.w, model::ForwardOptions{2, 8, {}});
  compress::CompressOptions co;
  co.method = method;
  co.ratio = 1.0;
  co.scorer = tiny_scorer_options();
  co.prefill.answer_room = 16;
  compress::CompressResult r = compress::compress(fwd, d.prefix, d.doc, co);
  CHECK(r.achieved_ratio == 1.0);
  CHECK(r.cache.kept_total() == uint64_t(d.cfg.n_layers) * d.cfg.n_kv_heads * 46);
  CHECK(r.cache.logical_length() == 46);

  // The same prefill path (same chunking, so the same rows bit for bit), no scoring, no eviction.
  prefill::PrefillResult dense = prefill::prefill_document(fwd, d.prefix, d.doc, co.prefill);
  const std::vector<float> want = fwd.prefill(dense.cache, d.question, model::LogitsMode::All);
  const std::vector<float> got = fwd.prefill(r.cache, d.question, model::LogitsMode::All);
  CHECK(got == want);
  // After reset the same question gives the same answer again (multi-query reuse).
  r.cache.reset();
  CHECK(fwd.prefill(r.cache, d.question, model::LogitsMode::All) == want);
}

TEST_CASE("compress keeps the requested share of document rows and records what it did",
          "[compress]") {
  Doc d;
  model::Forward fwd(d.w, model::ForwardOptions{2, 8, {}});
  compress::CompressOptions co;
  co.ratio = 0.3;
  co.scorer = tiny_scorer_options();
  co.prefill.answer_room = 16;
  compress::CompressResult r = compress::compress(fwd, d.prefix, d.doc, co);
  const uint64_t N = uint64_t(d.cfg.n_layers) * d.cfg.n_kv_heads * 40;
  CHECK(r.method == "kvzip");
  CHECK(r.requested_ratio == 0.3);
  CHECK(r.achieved_ratio == Approx(double(std::llround(0.3 * N)) / N));
  CHECK(r.cache.kept_total() ==
        uint64_t(d.cfg.n_layers) * d.cfg.n_kv_heads * 6 + std::llround(0.3 * N));
  CHECK(r.n_prefix == 6);
  CHECK(r.n_doc == 40);
  CHECK(r.params ==
        compress::MethodParams{{"chunk", "16"},
                               {"hint", "8"},
                               {"normalization", "local"},
                               {"reduce", "max over GQA group and reconstruction positions"},
                               {"level", "global"}});
  CHECK(r.prefill_s > 0);
  CHECK(r.scoring_s > 0);
  // kept_scores follow the rows: +inf on the prefix, probabilities on document rows.
  for (uint32_t l = 0; l < d.cfg.n_layers; ++l) {
    size_t row = 0;
    for (uint32_t h = 0; h < d.cfg.n_kv_heads; ++h) {
      const uint32_t* pos = r.cache.positions(l, h);
      for (uint32_t x = 0; x < r.cache.kept(l, h); ++x, ++row) {
        const float s = r.kept_scores[l][row];
        if (pos[x] < 6) CHECK(std::isinf(s));
        else CHECK((s > 0 && s <= 1));
      }
    }
    CHECK(row == r.kept_scores[l].size());
  }
  // The compressed cache answers (positions continue after the document).
  const std::vector<float> logits = fwd.prefill(r.cache, d.question, model::LogitsMode::Last);
  CHECK(logits.size() == d.cfg.vocab_size);
  CHECK(r.cache.view(0, 0).positions[r.cache.view(0, 0).len - 1] == 46 + 8);
}

TEST_CASE("full keeps everything whatever ratio is asked", "[compress]") {
  Doc d;
  model::Forward fwd(d.w, model::ForwardOptions{1, 64, {}});
  compress::CompressOptions co;
  co.method = "full";
  co.ratio = 0.2;
  co.prefill.answer_room = 16;
  compress::CompressResult r = compress::compress(fwd, d.prefix, d.doc, co);
  CHECK(r.achieved_ratio == 1.0);
  CHECK(r.requested_ratio == 1.0);
  CHECK(r.cache.kept_total() == uint64_t(d.cfg.n_layers) * d.cfg.n_kv_heads * 46);
}

TEST_CASE("compress refuses bad ratios, unknown methods and bad options before any work",
          "[compress]") {
  Doc d;
  model::Forward fwd(d.w, model::ForwardOptions{1, 64, {}});
  auto code_and_message = [&](const compress::CompressOptions& co) -> std::pair<Errc, std::string> {
    try {
      compress::compress(fwd, d.prefix, d.doc, co);
    } catch (const Error& e) {
      return {e.code(), e.what()};
    }
    return {Errc::internal, "no error"};
  };
  compress::CompressOptions co;
  co.scorer = tiny_scorer_options();
  for (double r : {0.0, -1.0, 1.5, std::nan("")}) {
    co.ratio = r;
    auto [code, msg] = code_and_message(co);
    INFO(msg);
    CHECK(code == Errc::invalid_argument);
    CHECK(msg.find("(0, 1]") != std::string::npos);
  }
  co.ratio = 0.5;
  co.method = "pyramid";
  auto [code, msg] = code_and_message(co);
  CHECK(code == Errc::invalid_argument);
  CHECK(msg.find("'pyramid'") != std::string::npos);
  CHECK(msg.find("kvzip, full, random, streaming, snapkv, h2o") != std::string::npos);

  co.method = "kvzip";
  co.scorer.prompts = {};
  CHECK(code_and_message(co).first == Errc::invalid_argument);
  co.scorer = tiny_scorer_options();
  co.scorer.snapkv_kernel = 6;
  CHECK_THROWS_AS(compress::make_scorer("snapkv", co.scorer), Error);
  co.scorer.kvzip_chunk = 0;
  CHECK_THROWS_AS(compress::make_scorer("kvzip", co.scorer), Error);
}

TEST_CASE("a document too long for the context is refused with both numbers", "[compress]") {
  Doc d;
  d.w.config.max_context = 50;  // 6 prefix + 40 document + 16 room = 62
  model::Forward fwd(d.w, model::ForwardOptions{1, 64, {}});
  compress::CompressOptions co;
  co.scorer = tiny_scorer_options();
  co.prefill.answer_room = 16;
  const Error e =
      test::error_from([&] { compress::compress(fwd, d.prefix, d.doc, co); }, "no error");
  test::check_context_refusal(e, {"40 document tokens", "62 tokens", "max context is 50"});
}
