// The dense KvCache on its own: the append protocol, growth preserving rows, O(1) rollback.
#include <catch2/catch.hpp>

#include "common/error.h"
#include "model/kv_cache.h"
#include "tests/support/random_weights.h"

using namespace kvzip;

TEST_CASE("dense cache keeps appended rows across growth and rolls back by length",
          "[model][forward]") {
  const model::CacheShape shape{2, 3, 4};
  model::KvCache cache(shape, 2);
  std::vector<std::vector<float>> ks, vs;
  for (int step = 0; step < 4; ++step) {  // 4 appends of 3 tokens: grows past capacity 2
    const uint32_t T = 3;
    cache.reserve_append(T);
    auto k = test::random_vector(T * 3 * 4, 100 + step), v = test::random_vector(T * 3 * 4, 200 + step);
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
          "[model][forward]") {
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

TEST_CASE("a cache with a zero dimension is refused", "[model][forward]") {
  CHECK_THROWS_AS(model::KvCache(model::CacheShape{2, 0, 4}), Error);
}
