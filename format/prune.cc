// Re-pruning a cache with its stored scores (format.h prune): the KVzip "global" selection
// (methods.md §1 step 7) applied to the rows still in the file — one threshold over every kept
// document row of every layer and head, ties at the cut evicted. Prefix rows are never evicted.
#include <algorithm>
#include <cmath>
#include <functional>

#include "format/format.h"

namespace kvzip::format {
namespace {

// floor(ratio * total), forgiving the last bit of floating-point error (0.3 * 1000 -> 300).
uint64_t budget(double ratio, uint64_t total) {
  double x = ratio * static_cast<double>(total);
  double k = std::floor(x);
  if (x - k > 1.0 - 1e-9) k += 1.0;
  return static_cast<uint64_t>(k);
}

}  // namespace

CacheContents prune(const CacheContents& c, double ratio) {
  validate(c);
  const CacheHeader& h = c.header;
  if (!c.has_scores)
    throw Error(Errc::invalid_argument,
                "this cache has no scores section, so it cannot be re-pruned without the model; "
                "compress the document again at the smaller ratio");
  if (!(ratio > 0.0 && ratio <= 1.0))
    throw Error(Errc::invalid_argument, "ratio " + std::to_string(ratio) + " outside (0, 1]");
  uint64_t n_p = h.prefix_length();
  uint64_t total = uint64_t{h.n_layers} * h.n_kv_heads * h.document_tokens.size();

  std::vector<float> doc_scores;  // every kept document row's score
  for (const LayerKv& layer : c.layers)
    for (size_t r = 0; r < layer.positions.size(); ++r)
      if (layer.positions[r] >= n_p) doc_scores.push_back(layer.scores[r]);
  uint64_t k = budget(ratio, total);
  if (k > doc_scores.size())
    throw Error(Errc::invalid_argument,
                "ratio " + std::to_string(ratio) + " would keep " + std::to_string(k) + " document rows but the cache holds " +
                    std::to_string(doc_scores.size()) + " (achieved ratio " + std::to_string(h.achieved_ratio) +
                    "); pruning can only remove rows");
  bool keep_all = k == doc_scores.size();
  float cut = 0;
  if (!keep_all) {  // the (k+1)-th best score; rows strictly above it stay
    std::nth_element(doc_scores.begin(), doc_scores.begin() + static_cast<ptrdiff_t>(k), doc_scores.end(),
                     std::greater<float>());
    cut = doc_scores[k];
  }

  CacheContents out;
  out.header = h;
  out.has_scores = true;
  uint64_t kept_doc = 0;
  uint32_t D = h.head_dim;
  for (const LayerKv& in : c.layers) {
    LayerKv& layer = out.layers.emplace_back();
    size_t row = 0;
    for (uint32_t rows : in.head_rows) {
      uint32_t kept = 0;
      for (uint32_t i = 0; i < rows; ++i, ++row) {
        bool doc = in.positions[row] >= n_p;
        if (doc && !keep_all && !(in.scores[row] > cut)) continue;
        kept_doc += doc;
        ++kept;
        layer.positions.push_back(in.positions[row]);
        layer.scores.push_back(in.scores[row]);
        layer.k.insert(layer.k.end(), in.k.begin() + row * D, in.k.begin() + (row + 1) * D);
        layer.v.insert(layer.v.end(), in.v.begin() + row * D, in.v.begin() + (row + 1) * D);
      }
      layer.head_rows.push_back(kept);
    }
  }
  out.header.requested_ratio = ratio;
  out.header.achieved_ratio = total ? static_cast<double>(kept_doc) / static_cast<double>(total) : 1.0;
  return out;
}

}  // namespace kvzip::format
