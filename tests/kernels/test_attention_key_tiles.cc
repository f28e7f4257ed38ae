// Key tiles (KvSpan::kt, kernels/attention.h): keys transposed once, ahead of the calls, must
// give the same attention bit for bit as the kernel's own per-call transposes, for one- and
// two-segment spans, tiles covering part of the span (a loaded base with appended rows), lengths
// around the 128-row tile, decode (key splits) and short prefill; the tile buffer holds the keys
// transposed with zeros past the rows. Also RaggedKvCache::make_key_tiles: views carry the tiles,
// and anything that can change the kept rows drops them. And attention_many: several calls in one
// pass of the pool give each call's result alone, bit for bit.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "cache/branch_cache.h"
#include "cache/ragged_cache.h"
#include "kernels/attention.h"
#include "kernels/thread_pool.h"
#include "tests/support/random_weights.h"

using namespace kvzip;
using namespace kvzip::kernels;  // the op under test
using kvzip::model::BranchCache;
using kvzip::model::CacheShape;
using kvzip::model::KvHeadView;
using kvzip::model::RaggedKvCache;

namespace {

struct TileCase {
  uint32_t T, Hq, Hkv, D;
  uint32_t len;      // rows per KV head (>= T)
  uint32_t split;    // rows of the first segment; == len: one segment
  uint32_t covered;  // rows the tiles cover (<= split, and <= len - T for one segment)
};

// A case's inputs: queries and per-head spans, without (plain) and with (tiled) key tiles.
struct TileData {
  std::vector<float> q;
  std::vector<std::vector<float>> kb, vb, kt, vt, tiles;
  std::vector<KvSpan> plain, tiled;
};

void make_case(const TileCase& c, uint64_t seed, TileData& t);

void check_case(const TileCase& c, ThreadPool* pool, uint64_t seed) {
  TileData t;
  make_case(c, seed, t);
  const size_t n = size_t(c.T) * c.Hq * c.D;
  std::vector<float> a(n, NAN), b(n, NAN);
  const float scale = 1.0f / std::sqrt(float(c.D));
  attention(Exec{Device::Cpu, pool},
            AttentionArgs{t.q.data(), t.plain.data(), a.data(), c.T, c.Hq, c.Hkv, c.D, scale});
  attention(Exec{Device::Cpu, pool},
            AttentionArgs{t.q.data(), t.tiled.data(), b.data(), c.T, c.Hq, c.Hkv, c.D, scale});
  INFO("T " << c.T << " len " << c.len << " split " << c.split << " covered " << c.covered);
  CHECK(std::isfinite(a[0]));
  CHECK(std::memcmp(a.data(), b.data(), n * sizeof(float)) == 0);
}

void make_case(const TileCase& c, uint64_t seed, TileData& t) {
  const size_t D = c.D;
  auto& [q, kb, vb, kt, vt, tiles, plain, tiled] = t;
  q = test::random_vector(size_t(c.T) * c.Hq * D, seed, -2, 2);
  for (uint32_t h = 0; h < c.Hkv; ++h) {
    const auto k = test::random_vector(size_t(c.len) * D, seed * 31 + h, -2, 2);
    const auto v = test::random_vector(size_t(c.len) * D, seed * 37 + h);
    kb.emplace_back(k.begin(), k.begin() + c.split * D);
    vb.emplace_back(v.begin(), v.begin() + c.split * D);
    kt.emplace_back(k.begin() + c.split * D, k.end());
    vt.emplace_back(v.begin() + c.split * D, v.end());
    tiles.emplace_back(key_tile_floats(c.covered, c.D), NAN);
    cpu::transpose_key_tiles(kb[h].data(), c.covered, c.D, tiles[h].data());
  }
  for (uint32_t h = 0; h < c.Hkv; ++h) {
    KvSpan s{kb[h].data(), vb[h].data(), c.len};
    if (c.split < c.len) s.k_tail = kt[h].data(), s.v_tail = vt[h].data(), s.split = c.split;
    plain.push_back(s);
    s.kt = tiles[h].data();
    s.kt_rows = c.covered;
    tiled.push_back(s);
    // The tiles: tile b is (D, 128), key j of the tile in column j; zeros past the rows.
    for (uint32_t j = 0; j < (c.covered + 127) / 128 * 128; ++j)
      for (uint32_t d = 0; d < c.D; ++d) {
        const float want = j < c.covered ? kb[h][j * D + d] : 0.0f;
        const float got = tiles[h][(size_t(j / 128) * D + d) * 128 + j % 128];
        if (got != want) FAIL("tile value of head " << h << " key " << j << " dim " << d);
      }
  }
}

}  // namespace

TEST_CASE("attention with key tiles made ahead equals per-call transposes bit for bit",
          "[kernels]") {
  ThreadPool pool(2);
  ThreadPool* pools[] = {nullptr, &pool};
  for (ThreadPool* p : pools) {
    // Decode over a base plus a tail (the served request): the tiles cover the base.
    for (uint32_t split : {1u, 127u, 128u, 129u, 300u, 700u})
      check_case({1, 9, 3, 64, split + 5, split, split}, p, split);
    check_case({1, 8, 2, 64, 301, 300, 257}, p, 7);  // tiles covering part of the base
    // One segment with appended rows after the covered ones (the base's own view).
    check_case({1, 4, 2, 64, 520, 520, 512}, p, 8);
    check_case({3, 4, 2, 20, 260, 260, 200}, p, 9);  // D = 20: padded V rows
    // Short prefill (several query blocks: the call's shared tiles take precedence).
    check_case({40, 9, 3, 64, 540, 500, 500}, p, 10);
  }
}

TEST_CASE("RaggedKvCache key tiles: views carry them until the kept rows may change", "[model]") {
  const CacheShape shape{2, 2, 16};  // L, Hkv, D
  RaggedKvCache cache(shape, 400, {130, 5, 0, 260}, 8);
  for (uint32_t l = 0; l < 2; ++l)
    for (uint32_t h = 0; h < 2; ++h) {
      const auto x = test::random_vector(size_t(cache.kept(l, h)) * 16, 100 + l * 2 + h);
      std::copy(x.begin(), x.end(), cache.k_rows(l, h));
    }
  CHECK(cache.view(0, 0).kt == nullptr);
  cache.make_key_tiles();
  CHECK(cache.bytes_key_tiles() >= (2 + 1 + 0 + 3) * 128 * 16 * sizeof(float));
  for (uint32_t l = 0; l < 2; ++l)
    for (uint32_t h = 0; h < 2; ++h) {
      const KvHeadView v = cache.view(l, h);
      REQUIRE(v.kt != nullptr);
      CHECK(v.kt_rows == cache.kept(l, h));
      for (uint32_t j = 0; j < v.kt_rows; ++j)
        CHECK(v.kt[(size_t(j / 128) * 16 + 3) * 128 + j % 128] == v.k[j * 16 + 3]);
    }
  {  // a branch over the base hands the base's tiles on for its first segment
    BranchCache branch(cache, 4);
    const KvHeadView v = branch.view(1, 1);
    CHECK(v.kt == cache.view(1, 1).kt);
    CHECK(v.kt_rows == 260);
  }
  const std::vector<uint32_t> keep{0, 2, 4};
  cache.retain(1, 1, keep);  // base rows change: the tiles go
  CHECK(cache.view(1, 1).kt == nullptr);
  CHECK(cache.view(0, 0).kt == nullptr);
  CHECK(cache.bytes_key_tiles() == 0);
}

TEST_CASE("attention_many: calls in one pass equal each call alone bit for bit", "[kernels]") {
  // A served step: decode rows over bases with tails, a question piece (several query blocks),
  // a one-segment call, an empty call, and spans with and without tiles.
  const std::vector<TileCase> cases = {
      {1, 9, 3, 64, 305, 300, 300},     {1, 9, 3, 64, 1030, 1000, 1000}, {1, 9, 3, 64, 140, 129, 0},
      {30, 9, 3, 64, 1030, 1000, 1000}, {1, 9, 3, 64, 520, 520, 512},    {0, 9, 3, 64, 10, 10, 0},
      {7, 9, 3, 64, 60, 20, 20}};
  ThreadPool pool(2);
  std::vector<TileData> data(cases.size());
  std::vector<AttentionArgs> calls;
  std::vector<std::vector<float>> alone(cases.size()), together(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const TileCase& c = cases[i];
    make_case(c, 50 + i, data[i]);
    const size_t n = size_t(c.T) * c.Hq * c.D;
    alone[i].assign(n, NAN);
    together[i].assign(n, NAN);
    const float scale = 1.0f / std::sqrt(float(c.D));
    const auto& spans = i % 2 ? data[i].plain : data[i].tiled;
    attention(Exec{Device::Cpu, &pool},
              AttentionArgs{data[i].q.data(), spans.data(), alone[i].data(), c.T, c.Hq, c.Hkv, c.D,
                            scale});
    calls.push_back(AttentionArgs{data[i].q.data(), spans.data(), together[i].data(), c.T, c.Hq,
                                  c.Hkv, c.D, scale});
  }
  attention_many(Exec{Device::Cpu, &pool}, calls.data(), calls.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO("call " << i);
    if (alone[i].empty()) continue;  // the T = 0 call: nothing written
    CHECK(std::memcmp(alone[i].data(), together[i].data(), alone[i].size() * sizeof(float)) == 0);
  }
}
