// KVzip and the baselines on hybrid attention (Gemma 3: sliding-window and global layers,
// compress/selection.h): a local layer keeps exactly its reachable rows (prefix + the document's
// last window - 1) and scores nothing, the ratio and every level count the global layers only, and
// a cache compressed at ratio 1 answers as the dense cache does (the rows dropped from the local
// layers are ones no later query can see); query-aware kvzip raises global-layer scores only.
// Model: the tiny Gemma 3 fixture (tests/golden/hf/gemma3: 6 layers, layers 0-4 local, window 8).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "cache/kv_cache.h"
#include "common/error.h"
#include "compress/pipeline.h"
#include "compress/selection.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/prefill.h"
#include "tests/compress/support.h"
#include "tests/support/hf_fixture.h"

using namespace kvzip;

namespace {

model::ForwardOptions one_thread() {
  model::ForwardOptions o;
  o.threads = 1;
  return o;
}

// The tiny Gemma 3 fixture with a one-thread Forward, for the cases that run it end to end.
struct Gemma3 {
  const std::unique_ptr<model::Model> m = model::Model::load(test::hf_golden("gemma3"));
  const ModelConfig& cfg = m->config();
  const uint32_t W = cfg.sliding_window;
  const std::vector<int32_t> prefix = m->chat().prefix("");
  model::Forward fwd{m->weights(), one_thread()};
};

compress::DocumentScores random_scores(uint32_t L, uint32_t H, uint32_t n_p, uint32_t n_c,
                                       uint64_t seed) {
  compress::DocumentScores s;
  s.shape = model::CacheShape{L, H, 4};
  s.n_prefix = n_p;
  s.n_doc = n_c;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  s.values.resize(size_t(L) * H * n_c);
  for (float& v : s.values) v = u(rng);
  return s;
}

std::vector<uint32_t> iota_rows(uint32_t a, uint32_t b) {
  std::vector<uint32_t> r;
  for (uint32_t i = a; i < b; ++i) r.push_back(i);
  return r;
}

double rel_err(const std::vector<float>& got, const std::vector<float>& ref) {
  REQUIRE(got.size() == ref.size());
  double d = 0, m = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    d = std::max(d, std::abs(double(got[i]) - ref[i]));
    m = std::max(m, std::abs(double(ref[i])));
  }
  return d / m;
}

}  // namespace

TEST_CASE("hybrid selection keeps a local layer's reachable rows and budgets the global layers",
          "[compress][hybrid]") {
  const uint32_t L = 3, H = 2, n_p = 2, n_c = 20, W = 5;
  compress::DocumentScores s = random_scores(L, H, n_p, n_c, 7);
  s.local_layers = {1, 0, 1};
  s.window = W;
  // Local layers: prefix + the last W - 1 document rows, whatever the level and ratio.
  const std::vector<uint32_t> local = [&] {
    std::vector<uint32_t> r = iota_rows(0, n_p);
    for (uint32_t j = n_c - (W - 1); j < n_c; ++j) r.push_back(n_p + j);
    return r;
  }();
  for (compress::SelectionLevel level :
       {compress::SelectionLevel::Global, compress::SelectionLevel::PerLayer,
        compress::SelectionLevel::PerHead}) {
    for (double ratio : {0.1, 0.5, 1.0}) {
      INFO("level " << compress::selection_level_name(level) << " ratio " << ratio);
      const compress::Selection sel = compress::select_rows(s, ratio, level);
      for (uint32_t l : {0u, 2u})
        for (uint32_t h = 0; h < H; ++h) CHECK(sel.keep[l * H + h] == local);
      // The budget is over layer 1 only: H · n_c rows.
      CHECK(sel.total_doc == uint64_t(H) * n_c);
      uint64_t kept = 0;
      for (uint32_t h = 0; h < H; ++h) kept += sel.keep[1 * H + h].size() - n_p;
      CHECK(kept == sel.kept_doc);
      const uint64_t want = level == compress::SelectionLevel::PerHead
                                ? H * uint64_t(std::floor(ratio * n_c + 1e-9))
                                : uint64_t(std::llround(ratio * H * n_c));
      CHECK(kept == want);
      CHECK(sel.achieved_ratio == Approx(double(kept) / double(H * n_c)));
    }
  }
  // A document shorter than the window: the local layers keep all of it.
  compress::DocumentScores short_doc = random_scores(L, H, n_p, 3, 8);
  short_doc.local_layers = s.local_layers;
  short_doc.window = W;
  CHECK(compress::select_rows(short_doc, 0.3, compress::SelectionLevel::Global).keep[0] ==
        iota_rows(0, n_p + 3));
}

TEST_CASE("a Gemma 3 cache compressed at ratio 1 answers as the dense cache",
          "[compress][hybrid][gemma3]") {
  const std::unique_ptr<model::Model> m = model::Model::load(test::hf_golden("gemma3"));
  const ModelConfig& cfg = m->config();
  REQUIRE(cfg.hybrid());
  const uint32_t W = cfg.sliding_window;
  const std::vector<int32_t> prefix = m->chat().prefix("");
  const std::vector<int32_t> doc = test::random_tokens(6 * W + 3, cfg.vocab_size, 11);
  const std::vector<int32_t> question = test::random_tokens(5, cfg.vocab_size, 12);
  model::ForwardOptions fo;
  fo.threads = 1;
  fo.chunk = 7;  // prefill chunks straddle the window
  model::Forward fwd(m->weights(), fo);

  model::KvCache dense(cfg);
  std::vector<int32_t> all = prefix;
  all.insert(all.end(), doc.begin(), doc.end());
  fwd.prefill(dense, all, model::LogitsMode::None);
  const std::vector<float> want = fwd.prefill(dense, question, model::LogitsMode::All);

  for (const char* method : {"full", "kvzip"}) {
    INFO(method);
    compress::CompressOptions co;
    co.method = method;
    co.ratio = 1.0;
    co.prefill.answer_room = 16;
    co.prefill.attention_bf16 = false;  // compared with the fp32 dense prefill
    co.scorer = test::tiny_kvzip_options();
    compress::CompressResult r = compress::compress(fwd, prefix, doc, co);
    for (uint32_t l = 0; l < cfg.n_layers; ++l)
      for (uint32_t h = 0; h < cfg.n_kv_heads; ++h)
        CHECK(r.cache.kept(l, h) == prefix.size() + (cfg.is_local(l) ? W - 1 : doc.size()));
    CHECK(r.achieved_ratio == 1.0);
    const std::vector<float> got = fwd.prefill(r.cache, question, model::LogitsMode::All);
    CHECK(rel_err(got, want) <= 1e-5);
  }
}

TEST_CASE_METHOD(Gemma3,
                 "every method and level compresses a Gemma 3 document, keeping the local windows",
                 "[compress][hybrid][gemma3]") {
  const std::vector<int32_t> doc = test::random_tokens(5 * W, cfg.vocab_size, 21);
  uint32_t n_global = 0;
  for (uint32_t l = 0; l < cfg.n_layers; ++l) n_global += !cfg.is_local(l);
  for (const std::string& method : compress::scorer_names()) {
    for (compress::SelectionLevel level :
         {compress::SelectionLevel::Global, compress::SelectionLevel::PerLayer,
          compress::SelectionLevel::PerHead}) {
      INFO(method << " " << compress::selection_level_name(level));
      compress::CompressOptions co;
      co.method = method;
      co.ratio = 0.25;
      co.level = level;
      co.prefill.answer_room = 16;
      co.scorer = test::tiny_kvzip_options();
      co.scorer.snapkv_window = co.scorer.h2o_recent = co.scorer.restkv_window = 4;
      compress::CompressResult r = compress::compress(fwd, prefix, doc, co);
      uint64_t global_doc = 0;
      for (uint32_t l = 0; l < cfg.n_layers; ++l)
        for (uint32_t h = 0; h < cfg.n_kv_heads; ++h) {
          if (cfg.is_local(l)) {
            CHECK(r.cache.kept(l, h) == prefix.size() + W - 1);
            CHECK(r.cache.positions(l, h)[prefix.size()] == prefix.size() + doc.size() - (W - 1));
          } else {
            global_doc += r.cache.kept(l, h) - prefix.size();
          }
        }
      const double want = method == "full" ? 1.0 : 0.25;
      CHECK(double(global_doc) / double(uint64_t(n_global) * cfg.n_kv_heads * doc.size()) ==
            Approx(want).margin(0.03));
      // The compressed cache answers (local layers over their window, global over the kept rows).
      const std::vector<float> logits =
          fwd.prefill(r.cache, std::vector<int32_t>{5, 6, 7}, model::LogitsMode::Last);
      CHECK(std::all_of(logits.begin(), logits.end(), [](float x) { return std::isfinite(x); }));
    }
  }
}

TEST_CASE_METHOD(
    Gemma3, "a hybrid prefill trims local layers to their window and answers as the full cache",
    "[compress][hybrid][gemma3]") {
  const std::vector<int32_t> doc = test::random_tokens(20 * W + 5, cfg.vocab_size, 31);
  const std::vector<int32_t> question = test::random_tokens(6, cfg.vocab_size, 32);
  const uint32_t n_p = uint32_t(prefix.size()), total = n_p + uint32_t(doc.size());

  model::KvCache dense(cfg);  // untrimmed: every layer holds every position
  std::vector<int32_t> all = prefix;
  all.insert(all.end(), doc.begin(), doc.end());
  fwd.prefill(dense, all, model::LogitsMode::None);
  const std::vector<float> want = fwd.prefill(dense, question, model::LogitsMode::All);

  prefill::PrefillOptions po;
  po.chunk = 5;  // many appends, each after a drop
  po.answer_room = 16;
  po.attention_bf16 = false;  // compared with the fp32 dense prefill
  prefill::PrefillResult pre = prefill::prefill_document(fwd, prefix, doc, po);
  for (uint32_t l = 0; l < cfg.n_layers; ++l) {
    const model::KvHeadView v = pre.cache.view(l, 0);
    INFO("layer " << l);
    if (!cfg.is_local(l)) {
      CHECK(v.len == total);
      continue;
    }
    CHECK(v.len <= n_p + 2 * W);
    CHECK(v.len >= n_p + W - 1);
    for (uint32_t r = 0; r < n_p; ++r) CHECK(v.positions[r] == r);  // the prefix stays
    for (uint32_t r = n_p; r < v.len; ++r)
      CHECK(v.positions[r] == total - (v.len - r));  // then the last rows
    CHECK(pre.cache.layer_capacity(l) <= n_p + 2 * W);
  }
  CHECK(pre.cache.bytes_used() < dense.bytes_used() / 2);
  const std::vector<float> got = fwd.prefill(pre.cache, question, model::LogitsMode::All);
  CHECK(rel_err(got, want) <= 1e-5);
  pre.cache.rollback(total);  // the rows a token at `total` reads are all there
  CHECK(rel_err(fwd.prefill(pre.cache, question, model::LogitsMode::All), want) <= 1e-5);
  try {
    pre.cache.rollback(n_p + W);  // its window was dropped
    FAIL("rolled back past dropped rows");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::invalid_argument);
  }
  pre.cache.rollback(0);  // back to empty is always possible
  CHECK(pre.cache.view(0, 0).len == 0);

  model::KvCache plain(model::cache_shape(cfg));  // no layer layout: nothing to trim by
  CHECK_THROWS_AS(plain.trim_local_layers(true, 0), Error);
}

TEST_CASE_METHOD(
    Gemma3,
    "after a trimmed prefill, KVzip scoring and long appends grow local layers by their own rows",
    "[compress][hybrid][gemma3]") {
  const std::vector<int32_t> doc = test::random_tokens(30 * W, cfg.vocab_size, 51);
  const std::vector<int32_t> question =
      test::random_tokens(6 * W, cfg.vocab_size, 52);  // > the room
  const uint32_t n_p = uint32_t(prefix.size()), total = n_p + uint32_t(doc.size());
  model::KvCache dense(cfg);
  std::vector<int32_t> all = prefix;
  all.insert(all.end(), doc.begin(), doc.end());
  fwd.prefill(dense, all, model::LogitsMode::None);
  const std::vector<float> want = fwd.prefill(dense, question, model::LogitsMode::All);

  // The KVzip scorer's reconstruction passes fit in the room the prefill reserved for them: the
  // cache is never regrown (by a copy) while it is scored.
  const compress::ScorerOptions so = test::tiny_kvzip_options();
  std::unique_ptr<compress::Scorer> kvzip = compress::make_scorer("kvzip", so);
  prefill::PrefillOptions po;
  po.chunk = 7;  // chunks shorter than the window: the local layers drop rows
  po.answer_room = 4;
  po.attention_bf16 = false;  // compared with the fp32 dense prefill
  po.scoring_room = kvzip->appended_rows(uint32_t(doc.size()));
  // the longer prompt ("next" and the hint), the turn's end, a chunk
  CHECK(po.scoring_room ==
        so.prompts.next.size() + so.kvzip_hint + so.prompts.turn_end.size() + so.kvzip_chunk);
  prefill::PrefillResult pre = prefill::prefill_document(fwd, prefix, doc, po);
  const uint32_t capacity = pre.cache.capacity();
  CHECK(capacity == total + po.scoring_room);
  kvzip->score(compress::ScoreInput{&fwd, &pre.cache, n_p, doc});
  CHECK(pre.cache.capacity() == capacity);
  CHECK(pre.cache.logical_length() == total);
  std::vector<uint32_t> local_rows(cfg.n_layers);
  for (uint32_t l = 0; l < cfg.n_layers; ++l) local_rows[l] = pre.cache.view(l, 0).len;

  // A question longer than the reserved room makes the cache grow: the global layers to the new
  // capacity, a local layer that dropped the document's older rows only by what is appended (it
  // used to be sized like a global layer then, which on a 30K-token Gemma 3 document took 1.7 GB).
  const std::vector<float> got = fwd.prefill(pre.cache, question, model::LogitsMode::All);
  CHECK(rel_err(got, want) <= 1e-5);
  CHECK(pre.cache.capacity() >= total + question.size());
  for (uint32_t l = 0; l < cfg.n_layers; ++l) {
    INFO("layer " << l);
    if (cfg.is_local(l)) {
      CHECK(local_rows[l] <= n_p + 2 * W);
      CHECK(pre.cache.view(l, 0).len == local_rows[l] + question.size());
      CHECK(pre.cache.layer_capacity(l) <= n_p + 2 * W + po.scoring_room + question.size());
      CHECK(pre.cache.layer_capacity(l) < total / 2);
    } else {
      CHECK(pre.cache.layer_capacity(l) == pre.cache.capacity());
    }
  }
  // reserve() still promises room for that many positions in every layer.
  pre.cache.reserve(pre.cache.capacity() + 100);
  for (uint32_t l = 0; l < cfg.n_layers; ++l)
    if (cfg.is_local(l)) CHECK(pre.cache.layer_capacity(l) >= pre.cache.view(l, 0).len + 100);
}

TEST_CASE_METHOD(Gemma3,
                 "pruning a Gemma 3 cache budgets the global layers and keeps the local windows",
                 "[compress][hybrid][gemma3]") {
  const std::vector<int32_t> doc = test::random_tokens(6 * W, cfg.vocab_size, 41);
  compress::CompressOptions co;
  co.ratio = 1.0;
  co.prefill.answer_room = 16;
  co.scorer = test::tiny_kvzip_options();
  compress::CompressResult r = compress::compress(fwd, prefix, doc, co);
  compress::CacheDescription d;
  d.prefix = prefix;
  d.document = doc;
  d.method = "kvzip";
  const format::CacheContents full = compress::make_contents(*m, r.cache, r.kept_scores, d);
  const format::CacheContents small = format::prune(full, 0.25);  // of the global layers' rows
  uint64_t global_doc = 0, n_global = 0;
  for (uint32_t l = 0; l < cfg.n_layers; ++l) {
    const format::LayerKv& a = full.layers[l];
    const format::LayerKv& b = small.layers[l];
    if (cfg.is_local(l)) {
      CHECK(b.positions == a.positions);  // the window stays whole
    } else {
      ++n_global;
      for (uint32_t p : b.positions) global_doc += p >= prefix.size();
    }
  }
  CHECK(double(global_doc) / double(n_global * cfg.n_kv_heads * doc.size()) ==
        Approx(0.25).margin(0.01));
  CHECK(small.header.achieved_ratio == Approx(0.25).margin(0.01));
  CHECK_THROWS_AS(format::prune(small, 0.5), Error);  // pruning only removes rows
}

TEST_CASE_METHOD(Gemma3, "query-aware kvzip on a Gemma 3 document raises global-layer scores only",
                 "[compress][hybrid][gemma3]") {
  const std::vector<int32_t> doc = test::random_tokens(4 * cfg.sliding_window, cfg.vocab_size, 31);
  prefill::PrefillOptions po;
  po.answer_room = 16;
  prefill::PrefillResult pre = prefill::prefill_document(fwd, prefix, doc, po);
  compress::ScorerOptions so = test::tiny_kvzip_options();
  const compress::DocumentScores a =
      compress::make_scorer("kvzip", so)->score({&fwd, &pre.cache, uint32_t(prefix.size()), doc});
  so.kvzip_queries = {test::random_tokens(6, cfg.vocab_size, 32)};
  const compress::DocumentScores q =
      compress::make_scorer("kvzip", so)->score({&fwd, &pre.cache, uint32_t(prefix.size()), doc});
  CHECK(pre.cache.logical_length() == prefix.size() + doc.size());
  REQUIRE(a.values.size() == q.values.size());
  size_t raised = 0;
  for (uint32_t l = 0; l < cfg.n_layers; ++l)
    for (uint32_t h = 0; h < cfg.n_kv_heads; ++h)
      for (uint32_t j = 0; j < doc.size(); ++j) {
        CHECK(q.at(l, h, j) >= a.at(l, h, j));
        if (cfg.is_local(l)) CHECK(q.at(l, h, j) == a.at(l, h, j));  // local layers are not scored
        raised += q.at(l, h, j) > a.at(l, h, j) ? 1 : 0;
      }
  CHECK(raised > 0);
}

TEST_CASE_METHOD(
    Gemma3,
    "the window scorers leave a Gemma 3 document's local layers unscored after a trimmed prefill",
    "[compress][hybrid][gemma3]") {
  // A trimmed local layer holds the prefix and its window, not the document's rows: a scorer that
  // read n_doc candidates there would read past the layer (and crashed on 8K-token documents).
  const std::vector<int32_t> doc = test::random_tokens(5 * cfg.sliding_window, cfg.vocab_size, 41);
  for (const char* method : {"rkv", "rest-kv"}) {
    INFO(method);
    compress::ScorerOptions so = test::tiny_kvzip_options();
    so.restkv_window = so.rkv_window = 4;
    std::unique_ptr<compress::Scorer> scorer = compress::make_scorer(method, so);
    prefill::PrefillOptions po;
    po.answer_room = 16;
    po.observer = scorer->prefill_observer(fwd, uint32_t(prefix.size()), uint32_t(doc.size()));
    prefill::PrefillResult pre = prefill::prefill_document(fwd, prefix, doc, po);
    const compress::DocumentScores s =
        scorer->score({&fwd, &pre.cache, uint32_t(prefix.size()), doc});
    size_t local = 0, global_finite = 0;
    for (uint32_t l = 0; l < cfg.n_layers; ++l)
      for (uint32_t h = 0; h < cfg.n_kv_heads; ++h)
        for (uint32_t j = 0; j < doc.size(); ++j) {
          if (cfg.is_local(l)) {
            CHECK(std::isinf(s.at(l, h, j)));  // left at "always keep": never computed
            ++local;
          } else {
            global_finite += std::isfinite(s.at(l, h, j)) ? 1 : 0;
          }
        }
    CHECK(local > 0);
    CHECK(global_finite > 0);  // the global layers are scored
  }
}
