// Re-pruning a cache with its stored scores (format.h prune): the KVzip "global" selection
// (spec/methods.md §1 step 7) applied to the rows still in the file — one threshold over every kept
// document row of every layer and head. Same rule as compress::select_rows (Global): exactly
// k = round(ratio · L·Hkv·n_c) rows stay; among scores equal to the cut, the rows earliest in file
// order (layer, head, position) stay. Prefix rows are never evicted. On a hybrid model's cache the
// ratio and the threshold cover the global layers; local layers keep their rows. A q8/q4 cache is pruned in its
// stored form: each kept row takes its own group parameters and codes (or its f16 values), and the
// per-head channel scales stay as they are (valid for any subset of rows), so nothing is quantized
// again.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>

#include "format/detail/quant.h"
#include "format/format.h"

namespace kvzip::format {
namespace {

// round(ratio * total), halves away from zero: the budget select_rows gives a global selection, so
// pruning a cache at the ratio it was compressed at keeps every row.
uint64_t budget(double ratio, uint64_t total) {
  return static_cast<uint64_t>(std::llround(ratio * static_cast<double>(total)));
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
  // Hybrid attention: local layers keep their reachable window whatever the ratio, which counts
  // the global layers' document rows only (as compress does).
  auto is_local = [&](size_t l) { return l < h.local_layers.size() && h.local_layers[l] != 0; };
  uint64_t global_layers = 0;
  for (size_t l = 0; l < h.n_layers; ++l) global_layers += !is_local(l);
  uint64_t total = global_layers * h.n_kv_heads * h.document_tokens.size();

  std::vector<float> doc_scores;  // every kept document row's score (global layers)
  for (size_t l = 0; l < c.layers.size(); ++l)
    for (size_t r = 0; r < c.layers[l].positions.size(); ++r)
      if (!is_local(l) && c.layers[l].positions[r] >= n_p)
        doc_scores.push_back(c.layers[l].scores[r]);
  uint64_t k = budget(ratio, total);
  if (k > doc_scores.size())
    throw Error(Errc::invalid_argument,
                "ratio " + std::to_string(ratio) + " would keep " + std::to_string(k) + " document rows but the cache holds " +
                    std::to_string(doc_scores.size()) + " (achieved ratio " + std::to_string(h.achieved_ratio) +
                    "); pruning can only remove rows");
  const bool keep_all = k == doc_scores.size();
  float cut = 0;         // the k-th best score: rows above it stay, then rows equal to it ...
  uint64_t at_cut = 0;   // ... in file order, this many of them
  if (!keep_all && k > 0) {
    std::nth_element(doc_scores.begin(), doc_scores.begin() + static_cast<ptrdiff_t>(k - 1),
                     doc_scores.end(), std::greater<float>());
    cut = doc_scores[k - 1];
    const uint64_t above = static_cast<uint64_t>(
        std::count_if(doc_scores.begin(), doc_scores.end(), [cut](float s) { return s > cut; }));
    at_cut = k - above;
  }

  CacheContents out;
  out.header = h;
  out.has_scores = true;
  uint64_t kept_doc = 0, kept_all = 0;  // document rows kept: global layers, all layers
  uint32_t D = h.head_dim;
  const bool quant = dtype_quantized(h.kv_dtype);
  const size_t P = quant ? detail::quant_param_words(h) : 0,  // parameter words per row
               B = quant ? D * dtype_bits(h.kv_dtype) / 8 : 0;
  // Row `at` of the f16 rows (f16) or of the quantized rows, moved as stored.
  auto take_row = [&](const QuantRows& in, QuantRows& o, bool f16, size_t at) {
    if (f16) {
      o.dense.insert(o.dense.end(), in.dense.begin() + at * D, in.dense.begin() + (at + 1) * D);
      return;
    }
    o.params.insert(o.params.end(), in.params.begin() + at * P, in.params.begin() + (at + 1) * P);
    o.codes.insert(o.codes.end(), in.codes.begin() + at * B, in.codes.begin() + (at + 1) * B);
  };
  for (size_t l = 0; l < c.layers.size(); ++l) {
    const LayerKv& in = c.layers[l];
    const bool local = is_local(l);
    LayerKv& layer = out.layers.emplace_back();
    if (quant) {
      layer.qk.channel_scale = in.qk.channel_scale;
      layer.qv.channel_scale = in.qv.channel_scale;
    }
    size_t row = 0, f16_at = 0, quant_at = 0;  // next row of in's f16 and quantized rows
    for (uint32_t rows : in.head_rows) {
      uint32_t kept = 0;
      for (uint32_t i = 0; i < rows; ++i, ++row) {
        const bool f16 = in.positions[row] < h.kv_f16_below;
        const size_t at = f16 ? f16_at++ : quant_at++;
        const bool doc = in.positions[row] >= n_p;
        if (doc && !keep_all && !local) {
          const float s = in.scores[row];
          if (k == 0 || s < cut) continue;
          if (s == cut) {
            if (at_cut == 0) continue;
            --at_cut;
          }
        }
        kept_doc += doc && !local;
        kept_all += doc;
        ++kept;
        layer.positions.push_back(in.positions[row]);
        layer.scores.push_back(in.scores[row]);
        layer.k.insert(layer.k.end(), in.k.begin() + row * D, in.k.begin() + (row + 1) * D);
        layer.v.insert(layer.v.end(), in.v.begin() + row * D, in.v.begin() + (row + 1) * D);
        if (quant) {
          take_row(in.qk, layer.qk, f16, at);
          take_row(in.qv, layer.qv, f16, at);
        }
      }
      layer.head_rows.push_back(kept);
    }
  }
  out.header.requested_ratio = ratio;
  out.header.achieved_ratio = total ? static_cast<double>(kept_doc) / static_cast<double>(total) : 1.0;
  const uint64_t total_all = uint64_t{h.n_layers} * h.n_kv_heads * h.document_tokens.size();
  for (auto& [key, value] : out.header.params)
    if (key == "all_layers_ratio") {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.6f",
                    total_all ? double(kept_all) / double(total_all) : 1.0);
      value = buf;
    }
  return out;
}

}  // namespace kvzip::format
