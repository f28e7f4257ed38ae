// RaggedKvCache on its own: from_dense copies the kept rows and positions per (layer, head);
// appends land after each head's rows at positions continuing from the logical length; rollback
// and reset return to earlier states without touching kept rows; growth (relayout) preserves all.
#include <catch2/catch.hpp>

#include "common/error.h"
#include "model/kv_cache.h"
#include "model/ragged_cache.h"
#include "tests/support/random_weights.h"

using namespace kvzip;

namespace {

constexpr uint32_t kL = 2, kH = 3, kD = 4;

KvCache dense_of(uint32_t T, uint64_t seed) {
  KvCache dense(CacheShape{kL, kH, kD});
  dense.reserve_append(T);
  auto k = test::random_vector(T * kH * kD, seed), v = test::random_vector(T * kH * kD, seed + 1);
  for (uint32_t l = 0; l < kL; ++l) dense.append(l, k.data(), v.data(), T);
  dense.commit_append(T);
  return dense;
}

// Appends T tokens whose K/V values are `tag + t` (all D entries) to every layer.
void append_tagged(RaggedKvCache& c, uint32_t T, float tag) {
  c.reserve_append(T);
  std::vector<float> kv(size_t(T) * kH * kD);
  for (uint32_t t = 0; t < T; ++t)
    for (size_t i = 0; i < size_t(kH) * kD; ++i) kv[t * kH * kD + i] = tag + float(t);
  for (uint32_t l = 0; l < kL; ++l) c.append(l, kv.data(), kv.data(), T);
  c.commit_append(T);
}

const std::vector<std::vector<uint32_t>> kKeep = {{0, 1, 5}, {}, {2, 3, 4, 7, 9}, {9}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 8}};

// Every kept row still equals its dense source.
void check_kept(const RaggedKvCache& c, const KvCache& dense) {
  for (uint32_t l = 0; l < kL; ++l)
    for (uint32_t h = 0; h < kH; ++h) {
      const auto& rows = kKeep[l * kH + h];
      const KvHeadView v = c.view(l, h), src = dense.view(l, h);
      REQUIRE(v.len >= rows.size());
      for (size_t x = 0; x < rows.size(); ++x) {
        REQUIRE(v.positions[x] == rows[x]);
        for (uint32_t d = 0; d < kD; ++d) {
          REQUIRE(v.k[x * kD + d] == src.k[rows[x] * kD + d]);
          REQUIRE(v.v[x * kD + d] == src.v[rows[x] * kD + d]);
        }
      }
    }
}

}  // namespace

TEST_CASE("from_dense keeps the listed rows of each head with their positions", "[model][ragged]") {
  KvCache dense = dense_of(10, 1);
  RaggedKvCache c = RaggedKvCache::from_dense(dense, kKeep, 4);
  CHECK(c.logical_length() == 10);
  CHECK(c.base_length() == 10);
  CHECK(c.kept_total() == 21);
  CHECK(c.bytes_kept() == 21ull * kD * 2 * 4);
  for (size_t i = 0; i < kKeep.size(); ++i) CHECK(c.kept(i / kH, i % kH) == kKeep[i].size());
  check_kept(c, dense);
}

TEST_CASE("appends follow each head's kept rows; rollback and reset restore earlier states",
          "[model][ragged]") {
  KvCache dense = dense_of(10, 2);
  RaggedKvCache c = RaggedKvCache::from_dense(dense, kKeep, 3);
  append_tagged(c, 2, 100.0f);  // positions 10, 11
  append_tagged(c, 3, 200.0f);  // positions 12..14: exceeds the room of 3, so the cache grows
  CHECK(c.logical_length() == 15);
  check_kept(c, dense);
  for (uint32_t l = 0; l < kL; ++l)
    for (uint32_t h = 0; h < kH; ++h) {
      const KvHeadView v = c.view(l, h);
      const uint32_t kept = c.kept(l, h);
      REQUIRE(v.len == kept + 5);
      const float want[5] = {100, 101, 200, 201, 202};
      for (uint32_t t = 0; t < 5; ++t) {
        REQUIRE(v.positions[kept + t] == 10 + t);
        REQUIRE(v.k[(kept + t) * kD] == want[t]);
        REQUIRE(v.v[(kept + t) * kD + kD - 1] == want[t]);
      }
    }
  c.rollback(11);  // keeps position 10 only
  CHECK(c.logical_length() == 11);
  CHECK(c.view(1, 2).len == c.kept(1, 2) + 1);
  append_tagged(c, 1, 300.0f);  // position 11 again, new values
  CHECK(c.view(0, 0).k[size_t(c.kept(0, 0) + 1) * kD] == 300.0f);
  CHECK(c.view(0, 0).positions[c.kept(0, 0) + 1] == 11);
  c.reset();
  CHECK(c.logical_length() == 10);
  for (size_t i = 0; i < kKeep.size(); ++i) CHECK(c.view(i / kH, i % kH).len == kKeep[i].size());
  check_kept(c, dense);
  CHECK_THROWS_AS(c.rollback(11), Error);  // beyond the logical length
}

TEST_CASE("an uncommitted append is visible in its layer only and rollback discards it",
          "[model][ragged]") {
  KvCache dense = dense_of(10, 3);
  RaggedKvCache c = RaggedKvCache::from_dense(dense, kKeep, 2);
  c.reserve_append(1);
  std::vector<float> kv(kH * kD, 7.0f);
  c.append(0, kv.data(), kv.data(), 1);
  CHECK(c.view(0, 1).len == 1);  // head (0, 1) kept nothing
  CHECK(c.view(1, 1).len == kKeep[4].size());
  CHECK(c.logical_length() == 10);
  c.rollback(10);
  CHECK(c.view(0, 1).len == 0);
  check_kept(c, dense);
}

TEST_CASE("from_dense refuses unsorted, repeated or out-of-range rows and wrong list counts",
          "[model][ragged]") {
  KvCache dense = dense_of(10, 4);
  auto bad = kKeep;
  bad[0] = {1, 0};
  CHECK_THROWS_AS(RaggedKvCache::from_dense(dense, bad), Error);
  bad[0] = {1, 1};
  CHECK_THROWS_AS(RaggedKvCache::from_dense(dense, bad), Error);
  bad[0] = {10};
  CHECK_THROWS_AS(RaggedKvCache::from_dense(dense, bad), Error);
  bad = kKeep;
  bad.pop_back();
  CHECK_THROWS_AS(RaggedKvCache::from_dense(dense, bad), Error);
}
