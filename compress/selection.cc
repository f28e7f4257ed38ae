// Selection and eviction (selection.h): each level reduces to "keep exactly k of these n scores"
// over a contiguous slice of the (L, Hkv, n_c) score array: global = the whole array,
// per-layer = one layer's (Hkv, n_c), per-head = one (n_c) row. The cut value comes from
// nth_element on a copy; rows strictly above it are kept, then rows equal to it in index order
// until k are kept.
#include "compress/selection.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "common/enum_names.h"
#include "common/error.h"

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
          top_k(s + (l * H + h) * n_c, n_c, floor_count(ratio * double(n_c)),
                mask.data() + (l * H + h) * n_c);
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

RunningSelection::RunningSelection(model::CacheShape shape, uint32_t n_prefix, uint32_t n_doc,
                                   double ratio, SelectionLevel level,
                                   std::vector<uint8_t> local_layers, uint32_t window)
    : shape_(shape),
      n_prefix_(n_prefix),
      n_doc_(n_doc),
      window_(window),
      local_(std::move(local_layers)) {
  check_ratio(ratio);
  const uint32_t L = shape.n_layers, H = shape.n_kv_heads;
  local_.resize(L);
  group_of_.assign(size_t(L) * H, -1);
  drops_.resize(size_t(L) * H);
  uint64_t global_layers = 0;
  for (uint32_t l = 0; l < L; ++l) global_layers += !local_[l];
  total_doc_ = global_layers * H * n_doc;
  // The budgets of select_rows, level by level.
  auto add_group = [&](uint64_t budget) {
    budget_.push_back(budget);
    groups_.emplace_back();
    return static_cast<int32_t>(groups_.size() - 1);
  };
  if (level == SelectionLevel::Global && global_layers > 0)
    add_group(round_count(ratio * double(total_doc_)));
  for (uint32_t l = 0; l < L; ++l) {
    if (local_[l]) continue;
    if (level == SelectionLevel::PerLayer)
      add_group(round_count(ratio * double(size_t(H) * n_doc)));
    for (uint32_t h = 0; h < H; ++h) {
      if (level == SelectionLevel::PerHead) add_group(floor_count(ratio * double(n_doc)));
      group_of_[size_t(l) * H + h] = static_cast<int32_t>(groups_.size() - 1);
    }
  }
}

const std::vector<std::vector<uint32_t>>& RunningSelection::add(uint32_t T, const float* scores,
                                                                size_t stride) {
  if (uint64_t(done_) + T > n_doc_)
    throw Error(Errc::invalid_argument, "RunningSelection: rows " + std::to_string(done_) + " + " +
                                            std::to_string(T) + " past a document of " +
                                            std::to_string(n_doc_));
  const size_t heads = group_of_.size();
  for (size_t i = 0; i < heads; ++i) {
    if (group_of_[i] < 0) continue;
    for (uint32_t t = 0; t < T; ++t)
      if (std::isnan(scores[i * stride + t]))
        throw Error(Errc::invalid_argument, "RunningSelection: the score of row " +
                                                std::to_string(done_ + t) + " of head " +
                                                std::to_string(i) + " is NaN");
  }
  for (std::vector<uint32_t>& d : drops_) d.clear();
  for (size_t i = 0; i < heads; ++i) {
    if (group_of_[i] < 0) continue;
    std::vector<Row>& g = groups_[size_t(group_of_[i])];
    for (uint32_t t = 0; t < T; ++t)
      g.push_back(Row{scores[i * stride + t], static_cast<uint32_t>(i), done_ + t});
  }
  // Strict total order of select_rows: higher score first, then lower flat index.
  auto better = [](const Row& a, const Row& b) {
    return a.score > b.score ||
           (a.score == b.score && (a.head < b.head || (a.head == b.head && a.j < b.j)));
  };
  for (size_t g = 0; g < groups_.size(); ++g) {
    std::vector<Row>& rows = groups_[g];
    if (rows.size() <= budget_[g]) continue;
    std::nth_element(rows.begin(), rows.begin() + budget_[g], rows.end(), better);
    for (size_t x = budget_[g]; x < rows.size(); ++x) drops_[rows[x].head].push_back(rows[x].j);
    rows.resize(budget_[g]);
  }
  // Local layers: the next query sees the last window - 1 rows before it.
  const uint32_t end = done_ + T;
  const uint32_t reach = window_ > 0 ? window_ - 1 : n_doc_;
  const uint32_t from = done_ > reach ? done_ - reach : 0, to = end > reach ? end - reach : 0;
  for (size_t i = 0; i < heads; ++i)
    if (group_of_[i] < 0)
      for (uint32_t j = from; j < to; ++j) drops_[i].push_back(j);
  for (std::vector<uint32_t>& d : drops_) std::sort(d.begin(), d.end());
  done_ = end;
  return drops_;
}

uint64_t RunningSelection::held() const {
  uint64_t n = 0;
  for (const std::vector<Row>& g : groups_) n += g.size();
  const uint32_t reach = window_ > 0 ? window_ - 1 : n_doc_;
  for (int32_t g : group_of_)
    if (g < 0) n += std::min(done_, reach);
  return n;
}

std::vector<std::vector<std::pair<uint32_t, float>>> RunningSelection::by_head() const {
  if (done_ != n_doc_)
    throw Error(Errc::internal, "RunningSelection: " + std::to_string(done_) + " of " +
                                    std::to_string(n_doc_) + " document rows added");
  std::vector<std::vector<std::pair<uint32_t, float>>> out(group_of_.size());
  for (const std::vector<Row>& g : groups_)
    for (const Row& r : g) out[r.head].emplace_back(r.j, r.score);
  for (auto& rows : out) std::sort(rows.begin(), rows.end());
  return out;
}

Selection RunningSelection::selection() const {
  const auto rows = by_head();
  Selection sel;
  sel.total_doc = total_doc_;
  sel.keep.resize(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    std::vector<uint32_t>& keep = sel.keep[i];
    keep.reserve(n_prefix_ + rows[i].size());
    for (uint32_t r = 0; r < n_prefix_; ++r) keep.push_back(r);
    for (const auto& [j, score] : rows[i]) keep.push_back(n_prefix_ + j);
    sel.kept_doc += rows[i].size();
  }
  sel.achieved_ratio = total_doc_ ? double(sel.kept_doc) / double(total_doc_) : 1.0;
  DocumentScores layout{shape_, n_prefix_, n_doc_, {}, {}, window_};
  for (uint8_t local : local_)
    if (local) layout.local_layers = local_;
  keep_local_windows(layout, sel);
  return sel;
}

std::vector<std::vector<float>> RunningSelection::kept_scores() const {
  const auto rows = by_head();
  const Selection sel = selection();
  const uint32_t H = shape_.n_kv_heads;
  constexpr float kAlways = std::numeric_limits<float>::infinity();
  std::vector<std::vector<float>> out(shape_.n_layers);
  for (size_t i = 0; i < rows.size(); ++i) {
    std::vector<float>& layer = out[i / H];
    if (group_of_[i] < 0) {
      layer.insert(layer.end(), sel.keep[i].size(), kAlways);
      continue;
    }
    layer.insert(layer.end(), n_prefix_, kAlways);
    for (const auto& [j, score] : rows[i]) layer.push_back(score);
  }
  return out;
}

EvictResult evict(const model::KvCache& dense, const DocumentScores& scores,
                  const Selection& selection, uint32_t room) {
  const model::CacheShape shape = dense.shape();
  const uint32_t n_p = scores.n_prefix, n_c = scores.n_doc;
  if (!(shape == scores.shape) || dense.logical_length() != n_p + n_c ||
      selection.keep.size() != size_t(shape.n_layers) * shape.n_kv_heads)
    throw Error(Errc::invalid_argument,
                "evict: the cache (" + std::to_string(dense.logical_length()) +
                    " tokens), the scores (prefix " + std::to_string(n_p) + " + document " +
                    std::to_string(n_c) + ") and the selection do not describe the same document");
  EvictResult r{
      model::RaggedKvCache::from_dense(dense, selection.keep, room), {}, selection.achieved_ratio};
  r.kept_scores.resize(shape.n_layers);
  for (uint32_t l = 0; l < shape.n_layers; ++l)
    for (uint32_t h = 0; h < shape.n_kv_heads; ++h)
      for (uint32_t row : selection.keep[size_t(l) * shape.n_kv_heads + h])
        r.kept_scores[l].push_back(row < n_p || scores.is_local(l)
                                       ? std::numeric_limits<float>::infinity()
                                       : scores.at(l, h, row - n_p));
  return r;
}

}  // namespace kvzip::compress
