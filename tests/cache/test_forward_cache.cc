// The dense KvCache on its own: the append protocol, growth preserving rows, O(1) rollback, and
// the transposed key tiles it can keep for CPU attention.
#include <catch2/catch.hpp>

#include "cache/kv_cache.h"
#include "common/error.h"
#include "kernels/attention.h"
#include "model/forward.h"
#include "tests/support/naive_forward.h"
#include "tests/support/random_weights.h"

using namespace kvzip;

TEST_CASE("dense cache keeps appended rows across growth and rolls back by length",
          "[cache][forward]") {
  const model::CacheShape shape{2, 3, 4};
  model::KvCache cache(shape, 2);
  std::vector<std::vector<float>> ks, vs;
  for (int step = 0; step < 4; ++step) {  // 4 appends of 3 tokens: grows past capacity 2
    const uint32_t T = 3;
    cache.reserve_append(T);
    auto k = test::random_vector(T * 3 * 4, 100 + step),
         v = test::random_vector(T * 3 * 4, 200 + step);
    for (uint32_t l = 0; l < 2; ++l) cache.append(l, k.data(), v.data(), T);
    cache.commit_append(T);
    ks.push_back(k);
    vs.push_back(v);
  }
  REQUIRE(cache.logical_length() == 12);
  CHECK(cache.capacity() >= 12);
  CHECK(cache.bytes_used() == 2ull * 2 * 3 * 12 * 4 * 4);
  for (uint32_t l = 0; l < 2; ++l)
    for (uint32_t h = 0; h < 3; ++h) {
      model::KvHeadView view = cache.view(l, h);
      REQUIRE(view.len == 12);
      for (uint32_t p = 0; p < 12; ++p) {
        REQUIRE(view.positions[p] == p);
        for (uint32_t d = 0; d < 4; ++d) {
          size_t src = ((p % 3) * 3 + h) * 4 + d;
          REQUIRE(view.k[p * 4 + d] == ks[p / 3][src]);
          REQUIRE(view.v[p * 4 + d] == vs[p / 3][src]);
        }
      }
    }
  cache.rollback(5);
  CHECK(cache.logical_length() == 5);
  CHECK(cache.view(1, 2).len == 5);
  CHECK_THROWS_AS(cache.rollback(6), Error);
}

TEST_CASE("uncommitted rows are visible in their layer only and rollback discards them",
          "[cache][forward]") {
  model::KvCache cache(model::CacheShape{2, 1, 2});
  std::vector<float> kv = {1, 2, 3, 4};
  cache.reserve_append(2);
  cache.append(0, kv.data(), kv.data(), 2);
  CHECK(cache.view(0, 0).len == 2);
  CHECK(cache.view(1, 0).len == 0);
  CHECK(cache.logical_length() == 0);
  cache.rollback(0);
  CHECK(cache.view(0, 0).len == 0);
}

TEST_CASE("a cache with a zero dimension is refused", "[cache][forward]") {
  CHECK_THROWS_AS(model::KvCache(model::CacheShape{2, 0, 4}), Error);
}

namespace {

// Every row of every head, read back from the cache's key tiles, equals the row itself.
void check_tiles(const model::KvCache& c) {
  const uint32_t D = c.shape().head_dim, B = kernels::kKeyTileRows;
  for (uint32_t l = 0; l < c.shape().n_layers; ++l)
    for (uint32_t h = 0; h < c.shape().n_kv_heads; ++h) {
      const model::KvHeadView v = c.view(l, h);
      REQUIRE(v.kt != nullptr);
      REQUIRE(v.kt_rows == v.len);
      for (uint32_t r = 0; r < v.len; ++r)
        for (uint32_t d = 0; d < D; ++d)
          REQUIRE(v.kt[size_t(r / B) * D * B + size_t(d) * B + r % B] == v.k[size_t(r) * D + d]);
    }
}

}  // namespace

TEST_CASE("key tiles follow appends, growth and rollback, and attention over them keeps its bits",
          "[cache][forward]") {
  const ModelConfig cfg = test::tiny_llama_config();
  const model::Weights w = test::random_weights(cfg, 31);
  model::Forward fwd(w, model::ForwardOptions{2, 64, {}});  // 64-token chunks: growth mid-prompt
  const std::vector<int32_t> doc = test::random_tokens(300, cfg.vocab_size, 32);
  const std::vector<int32_t> answer = test::random_tokens(6, cfg.vocab_size, 33);

  model::KvCache plain(cfg), early(cfg), late(cfg);
  early.keep_key_tiles(true);  // from empty: written as rows arrive, carried through each growth
  const std::vector<float> want = fwd.prefill(plain, doc, model::LogitsMode::Last);
  CHECK(fwd.prefill(early, doc, model::LogitsMode::Last) == want);
  fwd.prefill(late, doc, model::LogitsMode::None);
  late.keep_key_tiles(true);  // from the rows already held
  check_tiles(early);
  check_tiles(late);
  CHECK(early.bytes_key_tiles() >= plain.bytes_used() / 2);
  CHECK(plain.bytes_key_tiles() == 0);

  auto answer_logits = [&](model::KvCache& c) {
    std::vector<std::vector<float>> out;
    for (int32_t t : answer) out.push_back(fwd.decode(c, t));
    return out;
  };
  const auto want_answer = answer_logits(plain);
  CHECK(answer_logits(early) == want_answer);
  CHECK(answer_logits(late) == want_answer);

  // Back into the prompt (a stale tail stays in the tiles) and on again: the same bits.
  for (model::KvCache* c : {&plain, &early, &late}) c->rollback(200);
  const auto again = answer_logits(plain);
  CHECK(answer_logits(early) == again);
  CHECK(answer_logits(late) == again);
  check_tiles(early);

  early.keep_key_tiles(false);
  CHECK(early.view(0, 0).kt == nullptr);
  CHECK(early.bytes_key_tiles() == 0);
}
