// Selection and eviction (selection.h): each level reduces to "keep exactly k of these n scores" over a
// contiguous slice of the (L, Hkv, n_c) score array: global = the whole array, per-layer = one
// layer's (Hkv, n_c), per-head = one (n_c) row. The cut value comes from nth_element on a copy;
// rows strictly above it are kept, then rows equal to it in index order until k are kept.
#include "compress/selection.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "common/error.h"
#include "common/enum_names.h"

namespace kvzip::compress {
namespace {

// mask[i] = 1 for exactly k of the n scores: the largest, ties at the cut by lower index.
void top_k(const float* s, size_t n, size_t k, uint8_t* mask) {
  if (k >= n) {
    std::fill(mask, mask + n, uint8_t{1});
    return;
  }
  std::fill(mask, mask + n, uint8_t{0});
  if (k == 0) return;
  std::vector<float> copy(s, s + n);
  std::nth_element(copy.begin(), copy.begin() + (k - 1), copy.end(), std::greater<float>());
  const float cut = copy[k - 1];  // the k-th largest
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i)
    if (s[i] > cut) {
      mask[i] = 1;
      ++kept;
    }
  for (size_t i = 0; i < n && kept < k; ++i)
    if (s[i] == cut) {
      mask[i] = 1;
      ++kept;
    }
}

// floor(x) robust to x being a hair below an integer after the multiplication (0.29 · 100).
size_t floor_count(double x) { return static_cast<size_t>(std::floor(x + 1e-9)); }
size_t round_count(double x) { return static_cast<size_t>(std::llround(x)); }

}  // namespace

constexpr EnumName<SelectionLevel> kLevelNames[] = {
    {SelectionLevel::Global, "global"},
    {SelectionLevel::PerHead, "per-head"},
    {SelectionLevel::PerLayer, "per-layer"},
};

SelectionLevel parse_selection_level(std::string_view name) {
  if (const auto level = enum_value(kLevelNames, name)) return *level;
  throw Error(Errc::invalid_argument, "unknown selection level '" + std::string(name) +
                                          "'; known levels: " + enum_names(kLevelNames));
}

const char* selection_level_name(SelectionLevel level) { return enum_name(kLevelNames, level); }

void check_ratio(double ratio) {
  if (!(ratio > 0.0 && ratio <= 1.0))  // also rejects NaN
    throw Error(Errc::invalid_argument,
                "ratio " + std::to_string(ratio) +
                    " is outside (0, 1]; it is the fraction of the document's KV pairs to keep, "
                    "e.g. 0.3");
}

void set_hybrid_layout(DocumentScores& s, const ModelConfig& c) {
  s.local_layers.clear();
  s.window = 0;
  if (!c.hybrid()) return;
  s.local_layers = c.local_layers;
  s.window = c.sliding_window;
}

void keep_local_windows(const DocumentScores& s, Selection& sel) {
  const uint32_t L = s.shape.n_layers, H = s.shape.n_kv_heads, n_p = s.n_prefix, n_c = s.n_doc;
  const uint32_t reach = s.window > 0 ? std::min(n_c, s.window - 1) : n_c;
  for (uint32_t l = 0; l < L; ++l) {
    if (!s.is_local(l)) continue;
    for (uint32_t h = 0; h < H; ++h) {
      std::vector<uint32_t>& rows = sel.keep[size_t(l) * H + h];
      rows.clear();
      for (uint32_t r = 0; r < n_p; ++r) rows.push_back(r);
      for (uint32_t j = n_c - reach; j < n_c; ++j) rows.push_back(n_p + j);
    }
  }
}

Selection select_rows(const DocumentScores& scores, double ratio, SelectionLevel level) {
  check_ratio(ratio);
  const size_t L = scores.shape.n_layers, H = scores.shape.n_kv_heads, n_c = scores.n_doc;
  const size_t N = L * H * n_c;
  if (scores.values.size() != N)
    throw Error(Errc::invalid_argument, "select_rows: " + std::to_string(scores.values.size()) +
                                            " scores for L·Hkv·n_c = " + std::to_string(N));
  for (size_t i = 0; i < N; ++i)
    if (std::isnan(scores.values[i]))
      throw Error(Errc::invalid_argument, "select_rows: score " + std::to_string(i) + " is NaN");

  std::vector<uint8_t> mask(N);
  const float* s = scores.values.data();
  const size_t slice = H * n_c;  // one layer's scores
  std::vector<size_t> global_layers;
  for (size_t l = 0; l < L; ++l)
    if (!scores.is_local(uint32_t(l))) global_layers.push_back(l);
  const size_t Ng = global_layers.size() * slice;
  switch (level) {
    case SelectionLevel::Global:
      if (Ng == N) {
        top_k(s, N, round_count(ratio * double(N)), mask.data());
      } else {  // hybrid: one threshold over the global layers' scores only
        std::vector<float> g(Ng);
        std::vector<uint8_t> gm(Ng);
        for (size_t i = 0; i < global_layers.size(); ++i)
          std::copy_n(s + global_layers[i] * slice, slice, g.begin() + i * slice);
        top_k(g.data(), Ng, round_count(ratio * double(Ng)), gm.data());
        for (size_t i = 0; i < global_layers.size(); ++i)
          std::copy_n(gm.begin() + i * slice, slice, mask.begin() + global_layers[i] * slice);
      }
      break;
    case SelectionLevel::PerLayer:
      for (size_t l : global_layers)
        top_k(s + l * slice, slice, round_count(ratio * double(slice)), mask.data() + l * slice);
      break;
    case SelectionLevel::PerHead:
      for (size_t l : global_layers)
        for (size_t h = 0; h < H; ++h)
          top_k(s + (l * H + h) * n_c, n_c, floor_count(ratio * double(n_c)), mask.data() + (l * H + h) * n_c);
      break;
  }

  Selection sel;
  sel.total_doc = Ng;
  sel.keep.resize(L * H);
  const uint32_t n_p = scores.n_prefix;
  for (size_t i = 0; i < L * H; ++i) {
    std::vector<uint32_t>& rows = sel.keep[i];
    rows.reserve(n_p + n_c);
    for (uint32_t r = 0; r < n_p; ++r) rows.push_back(r);
    for (size_t j = 0; j < n_c; ++j)
      if (mask[i * n_c + j]) rows.push_back(n_p + static_cast<uint32_t>(j));
    sel.kept_doc += rows.size() - n_p;  // local layers' masks are empty here
  }
  sel.achieved_ratio = Ng ? double(sel.kept_doc) / double(Ng) : 1.0;
  keep_local_windows(scores, sel);
  return sel;
}

EvictResult evict(const model::KvCache& dense, const DocumentScores& scores, const Selection& selection,
                  uint32_t room) {
  const model::CacheShape shape = dense.shape();
  const uint32_t n_p = scores.n_prefix, n_c = scores.n_doc;
  if (!(shape == scores.shape) || dense.logical_length() != n_p + n_c ||
      selection.keep.size() != size_t(shape.n_layers) * shape.n_kv_heads)
    throw Error(Errc::invalid_argument,
                "evict: the cache (" + std::to_string(dense.logical_length()) +
                    " tokens), the scores (prefix " + std::to_string(n_p) + " + document " +
                    std::to_string(n_c) + ") and the selection do not describe the same document");
  EvictResult r{model::RaggedKvCache::from_dense(dense, selection.keep, room), {},
                selection.achieved_ratio};
  r.kept_scores.resize(shape.n_layers);
  for (uint32_t l = 0; l < shape.n_layers; ++l)
    for (uint32_t h = 0; h < shape.n_kv_heads; ++h)
      for (uint32_t row : selection.keep[size_t(l) * shape.n_kv_heads + h])
        r.kept_scores[l].push_back(row < n_p || scores.is_local(l) ? std::numeric_limits<float>::infinity()
                                                                   : scores.at(l, h, row - n_p));
  return r;
}

}  // namespace kvzip::compress
