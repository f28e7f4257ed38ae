// Re-pruning a cache with its stored scores (format.h prune): the KVzip "global" selection
// (spec/methods.md §1 step 7) applied to the rows still in the file — one threshold over every kept
// document row of every layer and head. Same rule as compress::select_rows (Global): exactly
// k = round(ratio · L·Hkv·n_c) rows stay; among scores equal to the cut, the rows earliest in file
// order (layer, head, position) stay. Prefix rows are never evicted. On a hybrid model's cache the
// ratio and the threshold cover the global layers; local layers keep their rows. A q8/q4 cache is
// pruned in its stored form: each kept row takes its own group parameters and codes (or its f16
// values), and the per-head channel scales stay as they are (valid for any subset of rows), so
// nothing is quantized again.
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

// Hybrid attention: local layers keep their reachable window whatever the ratio, which counts the
// global layers' document rows only (as compress does).
bool is_local(const CacheHeader& h, size_t l) {
  return l < h.local_layers.size() && h.local_layers[l] != 0;
}

// The global threshold: rows scoring above `cut` stay, then `at_cut` of the rows scoring exactly
// `cut`, in file order. keep_all: the budget is every row still in the file.
struct Cut {
  bool keep_all = false;
  uint64_t k = 0;  // document rows to keep (global layers)
  float cut = 0;
  uint64_t at_cut = 0;
};

Cut find_cut(const CacheContents& c, double ratio, uint64_t total) {
  const CacheHeader& h = c.header;
  const uint64_t n_p = h.prefix_length();
  std::vector<float> doc_scores;  // every kept document row's score (global layers)
  for (size_t l = 0; l < c.layers.size(); ++l)
    for (size_t r = 0; r < c.layers[l].positions.size(); ++r)
      if (!is_local(h, l) && c.layers[l].positions[r] >= n_p)
        doc_scores.push_back(c.layers[l].scores[r]);
  Cut t;
  t.k = budget(ratio, total);
  if (t.k > doc_scores.size())
    throw Error(Errc::invalid_argument,
                "ratio " + std::to_string(ratio) + " would keep " + std::to_string(t.k) +
                    " document rows but the cache holds " + std::to_string(doc_scores.size()) +
                    " (achieved ratio " + std::to_string(h.achieved_ratio) +
                    "); pruning can only remove rows");
  t.keep_all = t.k == doc_scores.size();
  if (!t.keep_all && t.k > 0) {
    std::nth_element(doc_scores.begin(), doc_scores.begin() + static_cast<ptrdiff_t>(t.k - 1),
                     doc_scores.end(), std::greater<float>());
    t.cut = doc_scores[t.k - 1];
    const uint64_t above = static_cast<uint64_t>(
        std::count_if(doc_scores.begin(), doc_scores.end(), [&](float s) { return s > t.cut; }));
    t.at_cut = t.k - above;
  }
  return t;
}

// Moves rows of one layer as stored: f32 K/V, and for q8/q4 each row's f16 values or its group
// parameters and codes.
class RowCopier {
 public:
  explicit RowCopier(const CacheHeader& h)
      : D_(h.head_dim),
        quant_(dtype_quantized(h.kv_dtype)),
        P_(quant_ ? detail::quant_param_words(h) : 0),
        B_(quant_ ? h.head_dim * dtype_bits(h.kv_dtype) / 8 : 0),
        f16_below_(h.kv_f16_below) {}

  void begin_layer(const LayerKv& in, LayerKv& out) {
    f16_at_ = quant_at_ = 0;
    if (quant_) {
      out.qk.channel_scale = in.qk.channel_scale;
      out.qv.channel_scale = in.qv.channel_scale;
    }
  }
  // Row `row` of `in`, every row of the layer visited in order (kept or not).
  void visit(const LayerKv& in, size_t row, bool keep, LayerKv& out) {
    const bool f16 = in.positions[row] < f16_below_;
    const size_t at = f16 ? f16_at_++ : quant_at_++;
    if (!keep) return;
    out.positions.push_back(in.positions[row]);
    out.scores.push_back(in.scores[row]);
    out.k.insert(out.k.end(), in.k.begin() + row * D_, in.k.begin() + (row + 1) * D_);
    out.v.insert(out.v.end(), in.v.begin() + row * D_, in.v.begin() + (row + 1) * D_);
    if (quant_) {
      take(in.qk, out.qk, f16, at);
      take(in.qv, out.qv, f16, at);
    }
  }

 private:
  void take(const QuantRows& in, QuantRows& o, bool f16, size_t at) const {
    if (f16) {
      o.dense.insert(o.dense.end(), in.dense.begin() + at * D_, in.dense.begin() + (at + 1) * D_);
      return;
    }
    o.params.insert(o.params.end(), in.params.begin() + at * P_, in.params.begin() + (at + 1) * P_);
    o.codes.insert(o.codes.end(), in.codes.begin() + at * B_, in.codes.begin() + (at + 1) * B_);
  }

  size_t D_;
  bool quant_;
  size_t P_, B_;
  uint64_t f16_below_;
  size_t f16_at_ = 0, quant_at_ = 0;  // next row of the input's f16 and quantized rows
};

// The ratio parameters of the pruned header: the requested and achieved ratio over the global
// layers, and "all_layers_ratio" over every layer where the cache records it.
void set_ratios(CacheHeader& out, double ratio, uint64_t kept_doc, uint64_t kept_all,
                uint64_t total) {
  out.requested_ratio = ratio;
  out.achieved_ratio = total ? static_cast<double>(kept_doc) / static_cast<double>(total) : 1.0;
  const uint64_t total_all = uint64_t{out.n_layers} * out.n_kv_heads * out.document_tokens.size();
  for (auto& [key, value] : out.params)
    if (key == "all_layers_ratio") {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.6f",
                    total_all ? double(kept_all) / double(total_all) : 1.0);
      value = buf;
    }
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
  const uint64_t n_p = h.prefix_length();
  uint64_t global_layers = 0;
  for (size_t l = 0; l < h.n_layers; ++l) global_layers += !is_local(h, l);
  const uint64_t total = global_layers * h.n_kv_heads * h.document_tokens.size();
  Cut t = find_cut(c, ratio, total);

  CacheContents out;
  out.header = h;
  out.has_scores = true;
  uint64_t kept_doc = 0, kept_all = 0;  // document rows kept: global layers, all layers
  RowCopier copy(h);
  for (size_t l = 0; l < c.layers.size(); ++l) {
    const LayerKv& in = c.layers[l];
    const bool local = is_local(h, l);
    LayerKv& layer = out.layers.emplace_back();
    copy.begin_layer(in, layer);
    size_t row = 0;
    for (uint32_t rows : in.head_rows) {
      uint32_t kept = 0;
      for (uint32_t i = 0; i < rows; ++i, ++row) {
        const bool doc = in.positions[row] >= n_p;
        bool keep = true;
        if (doc && !t.keep_all && !local) {
          const float s = in.scores[row];
          keep = !(t.k == 0 || s < t.cut);
          if (keep && s == t.cut) {
            if (t.at_cut == 0) keep = false;
            else --t.at_cut;
          }
        }
        copy.visit(in, row, keep, layer);
        if (!keep) continue;
        kept_doc += doc && !local;
        kept_all += doc;
        ++kept;
      }
      layer.head_rows.push_back(kept);
    }
  }
  set_ratios(out.header, ratio, kept_doc, kept_all, total);
  return out;
}

}  // namespace kvzip::format
