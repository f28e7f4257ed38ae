// RaggedKvCache on its own: from_dense copies the kept rows and positions per (layer, head);
// appends land after each head's rows at positions continuing from the logical length; rollback
// and reset return to earlier states without touching kept rows; growth (relayout) preserves all.
// The bookkeeping both RaggedKvCache and GpuCache use (RaggedLayout) is checked here on the host:
// a growth that fails at any layer (injected through its test seam) changes nothing, and the
// compressed state another device copies is the base, refused while appended rows exist.
#include <catch2/catch.hpp>

#include "cache/kv_cache.h"
#include "cache/ragged_cache.h"
#include "cache/ragged_layout.h"
#include "common/error.h"
#include "tests/support/random_weights.h"

using namespace kvzip;

namespace {

constexpr uint32_t kL = 2, kH = 3, kD = 4;

model::KvCache dense_of(uint32_t T, uint64_t seed) {
  model::KvCache dense(model::CacheShape{kL, kH, kD});
  dense.reserve_append(T);
  auto k = test::random_vector(T * kH * kD, seed), v = test::random_vector(T * kH * kD, seed + 1);
  for (uint32_t l = 0; l < kL; ++l) dense.append(l, k.data(), v.data(), T);
  dense.commit_append(T);
  return dense;
}

// Appends T tokens whose K/V values are `tag + t` (all D entries) to every layer.
void append_tagged(model::RaggedKvCache& c, uint32_t T, float tag) {
  c.reserve_append(T);
  std::vector<float> kv(size_t(T) * kH * kD);
  for (uint32_t t = 0; t < T; ++t)
    for (size_t i = 0; i < size_t(kH) * kD; ++i) kv[t * kH * kD + i] = tag + float(t);
  for (uint32_t l = 0; l < kL; ++l) c.append(l, kv.data(), kv.data(), T);
  c.commit_append(T);
}

const std::vector<std::vector<uint32_t>> kKeep = {
    {0, 1, 5}, {}, {2, 3, 4, 7, 9}, {9}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 8}};

// Every kept row still equals its dense source.
void check_kept(const model::RaggedKvCache& c, const model::KvCache& dense) {
  for (uint32_t l = 0; l < kL; ++l)
    for (uint32_t h = 0; h < kH; ++h) {
      const auto& rows = kKeep[l * kH + h];
      const model::KvHeadView v = c.view(l, h), src = dense.view(l, h);
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

TEST_CASE("from_dense keeps the listed rows of each head with their positions", "[cache][ragged]") {
  model::KvCache dense = dense_of(10, 1);
  model::RaggedKvCache c = model::RaggedKvCache::from_dense(dense, kKeep, 4);
  CHECK(c.logical_length() == 10);
  CHECK(c.base_length() == 10);
  CHECK(c.kept_total() == 21);
  CHECK(c.bytes_kept() == 21ull * kD * 2 * 4);
  for (size_t i = 0; i < kKeep.size(); ++i) CHECK(c.kept(i / kH, i % kH) == kKeep[i].size());
  check_kept(c, dense);
}

TEST_CASE("appends follow each head's kept rows; rollback and reset restore earlier states",
          "[cache][ragged]") {
  model::KvCache dense = dense_of(10, 2);
  model::RaggedKvCache c = model::RaggedKvCache::from_dense(dense, kKeep, 3);
  append_tagged(c, 2, 100.0f);  // positions 10, 11
  append_tagged(c, 3, 200.0f);  // positions 12..14: exceeds the room of 3, so the cache grows
  CHECK(c.logical_length() == 15);
  check_kept(c, dense);
  for (uint32_t l = 0; l < kL; ++l)
    for (uint32_t h = 0; h < kH; ++h) {
      const model::KvHeadView v = c.view(l, h);
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
          "[cache][ragged]") {
  model::KvCache dense = dense_of(10, 3);
  model::RaggedKvCache c = model::RaggedKvCache::from_dense(dense, kKeep, 2);
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
          "[cache][ragged]") {
  model::KvCache dense = dense_of(10, 4);
  auto bad = kKeep;
  bad[0] = {1, 0};
  CHECK_THROWS_AS(model::RaggedKvCache::from_dense(dense, bad), Error);
  bad[0] = {1, 1};
  CHECK_THROWS_AS(model::RaggedKvCache::from_dense(dense, bad), Error);
  bad[0] = {10};
  CHECK_THROWS_AS(model::RaggedKvCache::from_dense(dense, bad), Error);
  bad = kKeep;
  bad.pop_back();
  CHECK_THROWS_AS(model::RaggedKvCache::from_dense(dense, bad), Error);
}

namespace {

// Everything a reader of the cache sees, for before/after comparisons.
struct Snapshot {
  uint32_t length = 0, base = 0, room = 0;
  std::vector<std::vector<float>> k, v;
  std::vector<std::vector<uint32_t>> pos;
  bool operator==(const Snapshot&) const = default;
};

Snapshot snapshot(const model::RaggedKvCache& c) {
  Snapshot s{c.logical_length(), c.base_length(), c.layout().room(), {}, {}, {}};
  for (uint32_t l = 0; l < kL; ++l)
    for (uint32_t h = 0; h < kH; ++h) {
      const model::KvHeadView v = c.view(l, h);
      s.k.emplace_back(v.k, v.k + size_t(v.len) * kD);
      s.v.emplace_back(v.v, v.v + size_t(v.len) * kD);
      s.pos.emplace_back(v.positions, v.positions + v.len);
    }
  return s;
}

// Disarms the allocation seam however a test ends.
struct SeamGuard {
  ~SeamGuard() { model::testing::fail_layer_allocation(-1); }
};

}  // namespace

TEST_CASE("a growth whose allocation fails at any layer leaves the cache as it was",
          "[cache][ragged]") {
  SeamGuard guard;
  model::KvCache dense = dense_of(10, 5);
  model::RaggedKvCache c = model::RaggedKvCache::from_dense(dense, kKeep, 3);
  append_tagged(c, 2, 100.0f);  // positions 10, 11 in every head
  const Snapshot before = snapshot(c);
  for (int layer = 0; layer < int(kL); ++layer) {
    model::testing::fail_layer_allocation(layer);  // layer 0 staged fine, layer `layer` fails
    try {
      c.reserve_append(5);  // needs 7 rows of room, the cache has 3: grows
      FAIL("expected Errc::out_of_memory");
    } catch (const Error& e) {
      CHECK(e.code() == Errc::out_of_memory);
      CHECK(std::string(e.what()).find("layer " + std::to_string(layer)) != std::string::npos);
    }
    // Same rows, positions, lengths and room: the views read the old layout consistently.
    REQUIRE(snapshot(c) == before);
  }
  // The seam fired once per arming: the cache grows now and every row survives the move.
  append_tagged(c, 5, 200.0f);
  CHECK(c.layout().room() >= 7);
  CHECK(c.logical_length() == 17);
  check_kept(c, dense);
  const model::KvHeadView v = c.view(1, 2);
  REQUIRE(v.len == c.kept(1, 2) + 7);
  CHECK(v.positions[c.kept(1, 2) + 1] == 11);
  CHECK(v.k[size_t(c.kept(1, 2) + 1) * kD] == 101.0f);
  CHECK(v.positions[c.kept(1, 2) + 6] == 16);
  CHECK(v.v[size_t(c.kept(1, 2) + 6) * kD] == 204.0f);
  // Rollback still finds the rows by position after the failures and the growth.
  c.reset();
  CHECK(c.logical_length() == 10);
  check_kept(c, dense);
}

TEST_CASE("the compressed state another device copies is the base, with appended rows refused",
          "[cache][ragged]") {
  model::KvCache dense = dense_of(10, 6);
  model::RaggedKvCache c = model::RaggedKvCache::from_dense(dense, kKeep, 4);
  append_tagged(c, 3, 100.0f);
  // Appended rows would be lost by a copy of the kept rows: refused, naming the head.
  try {
    (void)c.layout().compressed_state("copy");
    FAIL("expected Errc::invalid_argument");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::invalid_argument);
    CHECK(std::string(e.what()).find("layer 0 head 0 holds 6 rows, 3 of them kept") !=
          std::string::npos);
  }
  // R-KV style eviction of the appended rows only: every head holds its kept rows again while
  // the logical length stays 13. The copy starts from the base length (10), not from 13.
  for (uint32_t l = 0; l < kL; ++l)
    for (uint32_t h = 0; h < kH; ++h) {
      std::vector<uint32_t> rows(c.kept(l, h));
      for (uint32_t r = 0; r < rows.size(); ++r) rows[r] = r;
      c.retain(l, h, rows);
    }
  REQUIRE(c.logical_length() == 13);
  const model::RaggedLayout base = c.layout().compressed_state("copy");
  CHECK(base.logical_length() == 10);
  CHECK(base.base_length() == 10);
  for (size_t i = 0; i < kKeep.size(); ++i) {
    CHECK(base.kept(i / kH, i % kH) == kKeep[i].size());
    CHECK(base.len(i / kH, i % kH) == kKeep[i].size());
  }
  // An uncommitted append counts too.
  c.reset();
  c.reserve_append(1);
  std::vector<float> kv(kH * kD, 7.0f);
  c.append(0, kv.data(), kv.data(), 1);
  CHECK_THROWS_AS(c.layout().compressed_state("copy"), Error);
  c.rollback(10);
  CHECK(c.layout().compressed_state("copy").logical_length() == 10);
}
