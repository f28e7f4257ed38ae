// Re-pruning with stored scores: the global threshold keeps exactly the best-scoring document
// rows (ties at the cut evicted), never a prefix row, keeps row order, and refuses what it
// cannot do (no scores, growing the ratio, ratios outside (0, 1]).
#include <catch2/catch.hpp>

#include <algorithm>
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
  uint64_t budget = total / 4;

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
  CHECK(*std::min_element(kept_doc.begin(), kept_doc.end()) > *std::max_element(dropped_doc.begin(), dropped_doc.end()));
  CHECK(out.header.requested_ratio == 0.25);
  CHECK(out.header.achieved_ratio == static_cast<double>(budget) / total);
  validate(out);  // still a writable cache
}

TEST_CASE("prune evicts every row tied at the cut", "[format]") {
  CacheContents in = golden_contents(DType::F32);
  for (auto& layer : in.layers)
    for (size_t i = 0; i < layer.scores.size(); ++i)
      if (layer.positions[i] >= 3) layer.scores[i] = 0.5f;  // all document rows tie
  CacheContents out = prune(in, 0.3);
  for (const auto& layer : out.layers)
    for (uint32_t p : layer.positions) CHECK(p < 3);
  CHECK(out.header.achieved_ratio == 0.0);
}

TEST_CASE("prune at the cache's own ratio keeps every row", "[format]") {
  CacheContents in = golden_contents(DType::F32);
  CacheContents out = prune(in, 0.5);
  for (size_t l = 0; l < in.layers.size(); ++l) CHECK(out.layers[l].positions == in.layers[l].positions);
}

TEST_CASE("prune refuses caches without scores, larger ratios and ratios outside (0, 1]", "[format]") {
  CacheContents in = golden_contents(DType::F32);
  CHECK(code_of([&] { prune(in, 0.6); }) == Errc::invalid_argument);
  CHECK(code_of([&] { prune(in, 0.0); }) == Errc::invalid_argument);
  CHECK(code_of([&] { prune(in, 1.5); }) == Errc::invalid_argument);
  SyntheticSpec spec;
  spec.scores = false;
  CHECK(code_of([&] { prune(synthetic(spec), 0.1); }) == Errc::invalid_argument);
}
