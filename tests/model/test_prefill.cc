// prefill_document: the same cache as one plain forward over [prefix ; document], progress reported
// per chunk up to the total, the context check stating both numbers. (The progress bar that shows
// it is tests/cli/test_progress.cc.)
#include <catch2/catch.hpp>

#include <string>

#include "common/error.h"
#include "model/prefill.h"
#include "tests/compress/support.h"
#include "tests/support/random_weights.h"
#include "tests/support/thrown.h"

using namespace kvzip;

TEST_CASE("prefill_document fills the cache like one forward over prefix and document", "[model]") {
  const ModelConfig cfg = test::tiny_llama_config();
  const model::Weights w = test::random_weights(cfg, 80);
  auto prefix = test::random_tokens(5, cfg.vocab_size, 81);
  auto doc = test::random_tokens(23, cfg.vocab_size, 82);
  model::Forward fwd(w, model::ForwardOptions{2, 512, {}});

  std::vector<prefill::PrefillProgress> seen;
  prefill::PrefillOptions po;
  po.chunk = 7;  // chunks straddle the prefix/document boundary
  po.answer_room = 10;
  po.attention_bf16 = false;  // compared with a plain fp32 forward below
  po.progress = [&](const prefill::PrefillProgress& p) { seen.push_back(p); };
  prefill::PrefillResult r = prefill::prefill_document(fwd, prefix, doc, po);
  CHECK(r.n_prefix == 5);
  CHECK(r.n_doc == 23);
  CHECK(r.cache.logical_length() == 28);
  CHECK(r.cache.capacity() >= 38);  // room for the answer without re-growing
  CHECK(r.seconds > 0);

  REQUIRE(seen.size() == 1 + 4);  // 0, 7, 14, 21, 28
  for (size_t i = 0; i < seen.size(); ++i) {
    CHECK(seen[i].done == std::min<uint64_t>(28, 7 * i));
    CHECK(seen[i].total == 28);
  }
  CHECK(seen.back().tokens_per_s > 0);

  std::vector<int32_t> all = prefix;
  all.insert(all.end(), doc.begin(), doc.end());
  model::KvCache plain(cfg);
  fwd.prefill(plain, all, model::LogitsMode::None);
  for (uint32_t l = 0; l < cfg.n_layers; ++l)
    for (uint32_t h = 0; h < cfg.n_kv_heads; ++h) {
      const model::KvHeadView a = r.cache.view(l, h), b = plain.view(l, h);
      REQUIRE(a.len == 28);
      CHECK(test::rel_error(a.k, b.k, size_t(28) * cfg.head_dim) < 1e-5);
      CHECK(test::rel_error(a.v, b.v, size_t(28) * cfg.head_dim) < 1e-5);
    }
}

TEST_CASE("a sequence longer than the model's context is refused with both numbers", "[model]") {
  ModelConfig cfg = test::tiny_llama_config();
  cfg.max_context = 100;
  const Error e =
      test::error_from([&] { prefill::check_fits_context(cfg, 10, 80, 20); }, "no error");
  test::check_context_refusal(
      e, {"80 document tokens + 10 prefix tokens + 20 tokens", "110 tokens", "max context is 100"});
  CHECK_NOTHROW(prefill::check_fits_context(cfg, 10, 70, 20));          // exactly full
  CHECK_THROWS_AS(prefill::check_fits_context(cfg, 10, 0, 20), Error);  // empty document
  cfg.max_context = 0;                                                  // unknown: no limit
  CHECK_NOTHROW(prefill::check_fits_context(cfg, 10, 100000, 20));
}
