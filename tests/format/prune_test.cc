// Re-pruning with stored scores: the global threshold keeps exactly round(r·L·Hkv·n_c) of the
// best-scoring document rows (ties at the cut: earliest in file order, as select_rows), never a
// prefix row, keeps row order, and refuses what it cannot do (no scores, growing the ratio,
// ratios outside (0, 1]).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>

#include "tests/format/fixtures.h"

using namespace kvzip;
using namespace kvzip::format;
using namespace kvzip::format::testing;

namespace {
Errc code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  return Errc::internal;
}
}  // namespace

TEST_CASE("prune keeps the highest-scoring document rows and every prefix row", "[format]") {
  SyntheticSpec spec;
  spec.keep = 0.8;
  CacheContents in = synthetic(spec);
  const CacheHeader& h = in.header;
  uint64_t total = uint64_t{h.n_layers} * h.n_kv_heads * h.document_tokens.size();
  CacheContents out = prune(in, 0.25);
  const uint64_t budget = static_cast<uint64_t>(std::llround(0.25 * static_cast<double>(total)));

  std::vector<float> kept_doc, dropped_doc;
  uint64_t prefix_in = 0, prefix_out = 0;
  for (uint32_t l = 0; l < h.n_layers; ++l) {
    const LayerKv &a = in.layers[l], &b = out.layers[l];
    size_t j = 0;
    for (size_t i = 0; i < a.positions.size(); ++i) {
      bool doc = a.positions[i] >= h.prefix_length();
      prefix_in += !doc;
      bool kept = j < b.positions.size() && b.positions[j] == a.positions[i] &&
                  std::equal(b.k.begin() + j * h.head_dim, b.k.begin() + (j + 1) * h.head_dim,
                             a.k.begin() + i * h.head_dim);
      if (kept) {
        ++j;
        prefix_out += !doc;
      }
      if (doc) (kept ? kept_doc : dropped_doc).push_back(a.scores[i]);
    }
    CHECK(j == b.positions.size());  // output rows are a subsequence of the input rows
  }
  CHECK(prefix_out == prefix_in);
  CHECK(kept_doc.size() == budget);  // synthetic scores have no ties
  CHECK(*std::min_element(kept_doc.begin(), kept_doc.end()) >
        *std::max_element(dropped_doc.begin(), dropped_doc.end()));
  CHECK(out.header.requested_ratio == 0.25);
  CHECK(out.header.achieved_ratio == static_cast<double>(budget) / total);
  validate(out);  // still a writable cache
}

TEST_CASE("prune keeps exactly the budget, ties at the cut earliest in file order", "[format]") {
  CacheContents in = golden_contents(DType::F32);
  for (auto& layer : in.layers)
    for (size_t i = 0; i < layer.scores.size(); ++i)
      if (layer.positions[i] >= 3) layer.scores[i] = 0.5f;  // all 10 document rows tie
  // round(0.3 · 20) = 6: the first six document rows in (layer, head, position) order.
  CacheContents out = prune(in, 0.3);
  CHECK(out.layers[0].positions == std::vector<uint32_t>{0, 1, 2, 3, 5, 0, 1, 2, 4, 6, 7});
  CHECK(out.layers[0].head_rows == std::vector<uint32_t>{5, 6});
  CHECK(out.layers[1].positions == std::vector<uint32_t>{0, 1, 2, 7, 0, 1, 2});
  CHECK(out.layers[1].head_rows == std::vector<uint32_t>{4, 3});
  CHECK(out.header.achieved_ratio == 0.3);
}

TEST_CASE("prune breaks a tie straddling the cut by file order and keeps higher scores",
          "[format]") {
  CacheContents in = golden_contents(DType::F32);
  // Document rows in file order get 0.2, 0.5, 0.5, 0.9, 0.5, 0.1, ...: round(0.15 · 20) = 3 keeps
  // the 0.9 and the first two 0.5s.
  const float pattern[] = {0.2f, 0.5f, 0.5f, 0.9f, 0.5f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f};
  size_t n = 0;
  for (auto& layer : in.layers)
    for (size_t i = 0; i < layer.scores.size(); ++i)
      if (layer.positions[i] >= 3) layer.scores[i] = pattern[n++];
  REQUIRE(n == 10);
  CacheContents out = prune(in, 0.15);
  std::vector<float> kept;
  for (const auto& layer : out.layers)
    for (size_t i = 0; i < layer.scores.size(); ++i)
      if (layer.positions[i] >= 3) kept.push_back(layer.scores[i]);
  CHECK(kept == std::vector<float>{0.5f, 0.5f, 0.9f});
  // File order of the document rows: L0H0 {3, 5}, L0H1 {4, 6, 7}: 5 and 4 are the 0.5s kept,
  // 6 the 0.9.
  CHECK(out.layers[0].positions == std::vector<uint32_t>{0, 1, 2, 5, 0, 1, 2, 4, 6});
  CHECK(out.header.achieved_ratio == 0.15);
}

TEST_CASE("prune rounds the budget to the nearest row, as select_rows does", "[format]") {
  CacheContents in = golden_contents(DType::F32);  // distinct document scores
  for (double r : {0.32, 0.33, 0.375}) {           // 6.4 -> 6, 6.6 -> 7, 7.5 -> 8
    CacheContents out = prune(in, r);
    uint64_t kept = 0;
    for (const auto& layer : out.layers)
      for (uint32_t p : layer.positions) kept += p >= 3;
    CHECK(kept == static_cast<uint64_t>(std::llround(r * 20)));
  }
}

TEST_CASE("prune at the cache's own ratio keeps every row", "[format]") {
  CacheContents in = golden_contents(DType::F32);
  CacheContents out = prune(in, 0.5);
  for (size_t l = 0; l < in.layers.size(); ++l)
    CHECK(out.layers[l].positions == in.layers[l].positions);
}

TEST_CASE("prune refuses caches without scores, larger ratios and ratios outside (0, 1]",
          "[format]") {
  CacheContents in = golden_contents(DType::F32);
  CHECK(code_of([&] { prune(in, 0.6); }) == Errc::invalid_argument);
  CHECK(code_of([&] { prune(in, 0.0); }) == Errc::invalid_argument);
  CHECK(code_of([&] { prune(in, 1.5); }) == Errc::invalid_argument);
  SyntheticSpec spec;
  spec.scores = false;
  CHECK(code_of([&] { prune(synthetic(spec), 0.1); }) == Errc::invalid_argument);
}
