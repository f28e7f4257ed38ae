// Streaming compression (compress --stream): RunningSelection ends at select_rows' selection for
// scores fed a chunk at a time (every level, hybrid layouts, ties and +inf) and never holds more
// than the budget plus a chunk; StreamKvCache appends, retains, shrinks, rolls back and hands its
// rows over like the reference bookkeeping written here, and a forward over it equals one over the
// dense cache; compress_streaming keeps exactly what the offline kvzap pipeline keeps when one
// chunk holds the whole document (no row is dropped while it is read), and with small chunks holds
// at most the kept rows plus a chunk.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>

#include "cache/stream_cache.h"
#include "common/error.h"
#include "compress/learned_scorer.h"
#include "compress/pipeline.h"
#include "compress/selection.h"
#include "format/format.h"
#include "model/forward.h"
#include "model/model.h"
#include "tests/compress/support.h"
#include "tests/support/hf_fixture.h"
#include "tests/support/naive_forward.h"
#include "tests/support/random_weights.h"
#include "tests/support/tiny_model_dir.h"

using namespace kvzip;

namespace {

// A scorer file of random coefficients for `cfg` (the selection logic needs scores, not good ones).
std::shared_ptr<const format::ScorerFile> random_scorer(const ModelConfig& cfg,
                                                        const ModelFingerprint& model,
                                                        uint64_t seed) {
  format::ScorerFile f;
  f.model = model;
  f.n_layers = cfg.n_layers;
  f.n_kv_heads = cfg.n_kv_heads;
  f.d_model = cfg.d_model;
  f.r2.assign(cfg.n_layers, 0.5f);
  f.spearman.assign(cfg.n_layers, 0.5f);
  f.weights = test::random_vector(size_t(cfg.n_layers) * cfg.n_kv_heads * (cfg.d_model + 1), seed);
  return std::make_shared<const format::ScorerFile>(f);
}

// The same kept rows, positions and keys bit for bit, head by head.
void check_same_rows(const model::RaggedKvCache& a, const model::RaggedKvCache& b) {
  const model::CacheShape s = b.shape();
  for (uint32_t l = 0; l < s.n_layers; ++l)
    for (uint32_t h = 0; h < s.n_kv_heads; ++h) {
      const uint32_t n = b.kept(l, h);
      REQUIRE(a.kept(l, h) == n);
      CHECK(std::equal(a.positions(l, h), a.positions(l, h) + n, b.positions(l, h)));
      CHECK(std::equal(a.k_rows(l, h), a.k_rows(l, h) + size_t(n) * s.head_dim, b.k_rows(l, h)));
    }
}

// Scores drawn from few values (many ties), with some rows always kept (+inf).
compress::DocumentScores tied_scores(uint32_t L, uint32_t H, uint32_t n_p, uint32_t n_c,
                                     uint64_t seed) {
  compress::DocumentScores s;
  s.shape = model::CacheShape{L, H, 4};
  s.n_prefix = n_p;
  s.n_doc = n_c;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> u(0, 9);
  s.values.resize(size_t(L) * H * n_c);
  for (float& v : s.values)
    v = u(rng) == 0 ? std::numeric_limits<float>::infinity() : float(u(rng)) / 4.0f;
  return s;
}

// Feeds s to a RunningSelection in chunks of `chunk` rows, checking after each chunk that only
// held rows are dropped and that at most the budget plus a chunk is held; returns the selection.
compress::RunningSelection run(const compress::DocumentScores& s, double ratio,
                               compress::SelectionLevel level, uint32_t chunk) {
  compress::RunningSelection rs(s.shape, s.n_prefix, s.n_doc, ratio, level, s.local_layers,
                                s.window);
  const size_t heads = size_t(s.shape.n_layers) * s.shape.n_kv_heads;
  std::vector<std::set<uint32_t>> held(heads);
  uint64_t global_heads = 0;
  for (uint32_t l = 0; l < s.shape.n_layers; ++l)
    global_heads += s.is_local(l) ? 0 : s.shape.n_kv_heads;
  const uint64_t budget =
      std::llround(ratio * double(global_heads * s.n_doc)) + heads;  // rounding per group
  std::vector<float> buf(heads * chunk);
  while (rs.done() < s.n_doc) {
    const uint32_t j0 = rs.done(), T = std::min(chunk, s.n_doc - j0);
    for (size_t i = 0; i < heads; ++i)
      for (uint32_t t = 0; t < T; ++t) {
        buf[i * chunk + t] = s.values[i * s.n_doc + j0 + t];
        held[i].insert(j0 + t);
      }
    const auto& drops = rs.add(T, buf.data(), chunk);
    for (size_t i = 0; i < heads; ++i)
      for (uint32_t j : drops[i]) REQUIRE(held[i].erase(j) == 1);
    uint64_t n = 0;
    for (const auto& h : held) n += h.size();
    REQUIRE(n == rs.held());
    const uint64_t local_rows = (heads - global_heads) * (s.window ? s.window - 1 : s.n_doc);
    REQUIRE(n <= budget + global_heads * T + local_rows);
  }
  return rs;
}

std::vector<std::vector<float>> evict_order_scores(const compress::DocumentScores& s,
                                                   const compress::Selection& sel) {
  std::vector<std::vector<float>> out(s.shape.n_layers);
  for (uint32_t l = 0; l < s.shape.n_layers; ++l)
    for (uint32_t h = 0; h < s.shape.n_kv_heads; ++h)
      for (uint32_t row : sel.keep[size_t(l) * s.shape.n_kv_heads + h])
        out[l].push_back(row < s.n_prefix || s.is_local(l) ? std::numeric_limits<float>::infinity()
                                                           : s.at(l, h, row - s.n_prefix));
  return out;
}

}  // namespace

TEST_CASE("a running selection ends at select_rows' selection, holding the budget plus a chunk",
          "[compress][stream]") {
  using compress::SelectionLevel;
  for (bool hybrid : {false, true})
    for (SelectionLevel level :
         {SelectionLevel::Global, SelectionLevel::PerLayer, SelectionLevel::PerHead})
      for (double ratio : {0.05, 0.3, 0.71, 1.0})
        for (uint32_t chunk : {1u, 7u, 64u, 500u}) {
          CAPTURE(hybrid, compress::selection_level_name(level), ratio, chunk);
          compress::DocumentScores s = tied_scores(4, 3, 5, 97, 17 + chunk);
          if (hybrid) {
            s.local_layers = {1, 1, 0, 1};
            s.window = 9;
          }
          const compress::RunningSelection rs = run(s, ratio, level, chunk);
          const compress::Selection want = compress::select_rows(s, ratio, level);
          const compress::Selection got = rs.selection();
          CHECK(got.keep == want.keep);
          CHECK(got.kept_doc == want.kept_doc);
          CHECK(got.total_doc == want.total_doc);
          CHECK(got.achieved_ratio == want.achieved_ratio);
          CHECK(rs.kept_scores() == evict_order_scores(s, want));
        }
}

TEST_CASE("a running selection refuses NaN scores and rows past the document",
          "[compress][stream]") {
  compress::RunningSelection rs(model::CacheShape{1, 1, 4}, 0, 3, 0.5,
                                compress::SelectionLevel::Global);
  const float nan[1] = {std::numeric_limits<float>::quiet_NaN()};
  CHECK_THROWS_AS(rs.add(1, nan, 1), Error);
  const float ok[4] = {1, 2, 3, 4};
  CHECK_THROWS_AS(rs.add(4, ok, 4), Error);
  CHECK_THROWS_AS(rs.selection(), Error);  // not every row added yet
  CHECK_THROWS_AS(compress::RunningSelection(model::CacheShape{1, 1, 4}, 0, 3, 1.5,
                                             compress::SelectionLevel::Global),
                  Error);
}

TEST_CASE("a stream cache appends, retains, shrinks, rolls back and hands its rows over",
          "[compress][stream]") {
  const model::CacheShape shape{2, 3, 4};
  model::StreamKvCache c(shape);
  // Reference: per head the (position, k[0]) of every row; k and v rows carry their position.
  std::vector<std::vector<uint32_t>> ref(6);
  auto append = [&](uint32_t T) {
    c.reserve_append(T);
    const uint32_t p0 = c.logical_length();
    for (uint32_t l = 0; l < 2; ++l) {
      std::vector<float> k(size_t(T) * 3 * 4), v(k.size());
      for (uint32_t t = 0; t < T; ++t)
        for (uint32_t h = 0; h < 3; ++h)
          for (uint32_t d = 0; d < 4; ++d) {
            k[(t * 3 + h) * 4 + d] = float((p0 + t) * 100 + l * 10 + h);
            v[(t * 3 + h) * 4 + d] = -float((p0 + t) * 100 + l * 10 + h);
          }
      c.append(l, k.data(), v.data(), T);
    }
    c.commit_append(T);
    for (auto& r : ref)
      for (uint32_t t = 0; t < T; ++t) r.push_back(p0 + t);
  };
  auto check = [&] {
    for (uint32_t l = 0; l < 2; ++l)
      for (uint32_t h = 0; h < 3; ++h) {
        const model::KvHeadView v = c.view(l, h);
        const auto& r = ref[l * 3 + h];
        REQUIRE(v.len == r.size());
        for (uint32_t x = 0; x < v.len; ++x) {
          CHECK(v.positions[x] == r[x]);
          CHECK(v.k[x * 4 + 3] == float(r[x] * 100 + l * 10 + h));
          CHECK(v.v[x * 4] == -float(r[x] * 100 + l * 10 + h));
        }
      }
  };
  append(5);
  append(40);
  check();
  // Keep every third row of head (0, 1) and the last two of head (1, 2).
  std::vector<uint32_t> keep;
  for (uint32_t x = 0; x < 45; x += 3) keep.push_back(x);
  c.retain(0, 1, keep);
  std::vector<uint32_t> kept01;
  for (uint32_t x : keep) kept01.push_back(ref[1][x]);
  ref[1] = kept01;
  c.retain(1, 2, std::vector<uint32_t>{43, 44});
  ref[5] = {43, 44};
  check();
  const uint64_t before = c.bytes_allocated();
  c.shrink(4);
  CHECK(c.bytes_allocated() < before);
  check();
  append(7);
  check();
  CHECK_THROWS_AS(c.retain(0, 0, std::vector<uint32_t>{3, 2}), Error);
  CHECK_THROWS_AS(c.retain(0, 0, std::vector<uint32_t>{52}), Error);
  c.rollback(47);  // forgets positions 47..51
  for (auto& r : ref) r.erase(std::lower_bound(r.begin(), r.end(), 47u), r.end());
  check();
  CHECK(c.rows_total() == 4 * 47 + (15 + 2) + (2 + 2));
  const model::RaggedKvCache out = c.take(8);
  CHECK(out.base_length() == 47);
  CHECK(c.rows_total() == 0);
  for (uint32_t l = 0; l < 2; ++l)
    for (uint32_t h = 0; h < 3; ++h) {
      const auto& r = ref[l * 3 + h];
      REQUIRE(out.kept(l, h) == r.size());
      for (uint32_t x = 0; x < r.size(); ++x) {
        CHECK(out.positions(l, h)[x] == r[x]);
        CHECK(out.k_rows(l, h)[x * 4 + 1] == float(r[x] * 100 + l * 10 + h));
      }
    }
}

TEST_CASE("a forward over a stream cache equals one over the dense cache", "[compress][stream]") {
  const ModelConfig cfg = test::tiny_qwen2_config();
  const model::Weights w = test::random_weights(cfg, 401);
  model::Forward fwd(w, model::ForwardOptions{2, 16, {}});
  const std::vector<int32_t> tokens = test::random_tokens(70, cfg.vocab_size, 402);
  model::KvCache dense(cfg);
  model::StreamKvCache stream(model::cache_shape(cfg));
  const std::vector<float> a = fwd.prefill(dense, tokens, model::LogitsMode::Last);
  const std::vector<float> b = fwd.prefill(stream, tokens, model::LogitsMode::Last);
  CHECK(a == b);
  CHECK(fwd.decode(dense, 7) == fwd.decode(stream, 7));
}

namespace {

struct StreamTiny {
  ModelConfig cfg = test::tiny_qwen2_config();
  model::Weights w = test::random_weights(cfg, 411);
  std::vector<int32_t> prefix = test::random_tokens(5, cfg.vocab_size, 412);
  std::vector<int32_t> doc = test::random_tokens(150, cfg.vocab_size, 413);
  std::shared_ptr<const format::ScorerFile> file;
  StreamTiny() { file = random_scorer(cfg, ModelFingerprint{"qwen2", "tiny", 1, 2}, 414); }
  compress::CompressOptions options(double ratio, uint32_t chunk, bool stream) const {
    compress::CompressOptions o;
    o.method = compress::kLearnedMethod;
    o.ratio = ratio;
    o.stream = stream;
    o.prefill.chunk = chunk;
    o.prefill.answer_room = 16;
    o.scorer.learned = file;
    o.scorer.kvzap_window = 8;
    return o;
  }
};

}  // namespace

TEST_CASE("streaming in one chunk keeps exactly what kvzap keeps offline", "[compress][stream]") {
  const StreamTiny t;
  model::Forward fwd(t.w, model::ForwardOptions{2, 256, {}});
  for (compress::SelectionLevel level :
       {compress::SelectionLevel::Global, compress::SelectionLevel::PerHead}) {
    compress::CompressOptions o = t.options(0.3, 256, false);
    o.level = level;
    const compress::CompressResult off = compress::compress(fwd, t.prefix, t.doc, o);
    o.stream = true;
    const compress::CompressResult on = compress::compress(fwd, t.prefix, t.doc, o);
    CHECK(on.achieved_ratio == off.achieved_ratio);
    CHECK(on.kept_scores == off.kept_scores);
    check_same_rows(on.cache, off.cache);
    CHECK(on.params.back() == compress::MethodParams::value_type{"stream", "on"});
    CHECK(on.cache.base_length() == t.prefix.size() + t.doc.size());
  }
}

TEST_CASE("streaming in small chunks holds the kept rows plus a chunk, not the document",
          "[compress][stream]") {
  const StreamTiny t;
  model::Forward fwd(t.w, model::ForwardOptions{2, 16, {}});
  const uint32_t chunk = 10;
  const compress::CompressResult r =
      compress::compress(fwd, t.prefix, t.doc, t.options(0.2, chunk, true));
  const uint64_t heads = uint64_t(t.cfg.n_layers) * t.cfg.n_kv_heads;
  const uint64_t budget = std::llround(0.2 * double(heads * t.doc.size()));
  CHECK(r.achieved_ratio == Approx(0.2).margin(1e-9 + 1.0 / double(heads * t.doc.size())));
  CHECK(r.peak_rows <= heads * t.prefix.size() + budget + heads * chunk);
  CHECK(r.peak_rows < heads * (t.prefix.size() + t.doc.size()) / 2);
  CHECK(r.peak_bytes > 0);
  // The last 8 document rows (the window) are kept in every head, and the cache answers.
  for (uint32_t l = 0; l < t.cfg.n_layers; ++l)
    for (uint32_t h = 0; h < t.cfg.n_kv_heads; ++h) {
      const uint32_t n = r.cache.kept(l, h);
      REQUIRE(n >= t.prefix.size() + 8);
      CHECK(r.cache.positions(l, h)[n - 8] == t.prefix.size() + t.doc.size() - 8);
    }
  model::RaggedKvCache cache = r.cache;
  const std::vector<float> logits = fwd.decode(cache, 3);
  CHECK(std::all_of(logits.begin(), logits.end(), [](float x) { return std::isfinite(x); }));
}

TEST_CASE("streaming compression needs method kvzap", "[compress][stream]") {
  compress::CompressOptions o;
  o.method = "snapkv";
  o.stream = true;
  CHECK_THROWS_WITH(compress::check_options(o), Catch::Contains("method kvzap"));
}

TEST_CASE("a streamed file holds the rows a streamed compression keeps", "[compress][stream]") {
  test::TinyModelDir dir("stream_file", 29, 1024);
  const ModelConfig& cfg = dir.model->config();
  const auto scorer = random_scorer(cfg, dir.model->fingerprint(), 30);
  compress::CompressFileOptions o;
  o.compress.method = compress::kLearnedMethod;
  o.compress.ratio = 0.25;
  o.compress.stream = true;
  o.compress.prefill.chunk = 16;
  o.compress.scorer.learned = scorer;
  o.compress.scorer.kvzap_window = 4;
  o.threads = 2;
  const std::string text =
      "The lighthouse keeper counted ships every night. In winter the harbor froze and the keeper "
      "read old letters from his sister, who lived in a city of bridges and bells.";
  const compress::CompressResult written =
      compress::compress_to_file(*dir.model, text, o, dir.path("s.kvz"));
  CHECK(written.cache.kept_total() == 0);  // the rows went to the file
  CHECK(written.peak_rows > 0);

  const compress::DocumentPrompt prompt = compress::document_prompt(dir.model->chat(), text, "");
  model::Forward fwd(dir.model->weights(), model::ForwardOptions{2, 512, {}});
  const compress::CompressResult direct =
      compress::compress(fwd, prompt.prefix, prompt.document, o.compress);
  CHECK(direct.achieved_ratio == written.achieved_ratio);
  const std::vector<format::LayerKv> want =
      compress::layers_from_cache(direct.cache, direct.kept_scores);
  const format::CacheReader reader = format::CacheReader::open(dir.path("s.kvz"));
  CHECK(reader.header().method == "kvzap");
  CHECK(reader.header().achieved_ratio == Approx(written.achieved_ratio));
  for (uint32_t l = 0; l < cfg.n_layers; ++l) {
    const format::LayerKv got = reader.load_layer(l);
    CHECK(got.head_rows == want[l].head_rows);
    CHECK(got.positions == want[l].positions);
    CHECK(got.k == want[l].k);
    CHECK(got.v == want[l].v);
    CHECK(got.scores == want[l].scores);
  }
}

TEST_CASE("page-allocated arrays hold, copy and free large and small blocks",
          "[compress][stream]") {
  using Paged = std::vector<float, model::detail::PageAllocator<float>>;
  for (size_t n : {size_t(10), size_t(1) << 20}) {  // under and over the mapping threshold
    Paged a(n);
    for (size_t i = 0; i < n; ++i) a[i] = float(i % 1000);
    Paged b = a;
    b.resize(n + 12345, 7.0f);
    CHECK(std::equal(a.begin(), a.end(), b.begin()));
    CHECK(b.back() == 7.0f);
    b.shrink_to_fit();
    b = Paged{};
    CHECK(a[n - 1] == float((n - 1) % 1000));
  }
}

TEST_CASE(
    "streaming a hybrid model keeps offline kvzap's rows in one chunk and local windows in many",
    "[compress][stream][hybrid]") {
  const std::unique_ptr<model::Model> m = model::Model::load(test::hf_golden("gemma3"));
  const ModelConfig& cfg = m->config();
  REQUIRE(cfg.hybrid());
  const auto scorer = random_scorer(cfg, m->fingerprint(), 31);
  model::Forward fwd(m->weights(), model::ForwardOptions{1, 256, {}});
  const std::vector<int32_t> prefix = m->chat().prefix("");
  const std::vector<int32_t> doc = test::random_tokens(90, cfg.vocab_size, 32);
  compress::CompressOptions o;
  o.method = compress::kLearnedMethod;
  o.ratio = 0.3;
  o.prefill.chunk = 256;
  o.prefill.answer_room = 16;
  o.scorer.learned = scorer;
  o.scorer.kvzap_window = 4;
  const compress::CompressResult off = compress::compress(fwd, prefix, doc, o);
  o.stream = true;
  const compress::CompressResult on = compress::compress(fwd, prefix, doc, o);
  CHECK(on.achieved_ratio == off.achieved_ratio);
  CHECK(on.kept_scores == off.kept_scores);
  check_same_rows(on.cache, off.cache);
  // Small chunks: a local layer never holds more than the prefix, its window and a chunk.
  o.prefill.chunk = 8;
  const compress::CompressResult small = compress::compress(fwd, prefix, doc, o);
  uint64_t local = 0, global = 0;
  for (uint32_t l = 0; l < cfg.n_layers; ++l) (cfg.is_local(l) ? local : global) += cfg.n_kv_heads;
  const uint64_t budget = std::llround(0.3 * double(global * doc.size()));
  CHECK(small.peak_rows <= (local + global) * prefix.size() + local * (cfg.sliding_window - 1) +
                               budget + (local + global) * 8);
  for (uint32_t l = 0; l < cfg.n_layers; ++l)
    if (cfg.is_local(l))
      CHECK(small.cache.kept(l, 0) ==
            prefix.size() + std::min<size_t>(doc.size(), cfg.sliding_window - 1));
  model::RaggedKvCache cache = small.cache;
  const std::vector<float> logits = fwd.decode(cache, 3);
  CHECK(std::all_of(logits.begin(), logits.end(), [](float x) { return std::isfinite(x); }));
}
