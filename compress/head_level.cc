// Head-level KVzip (compress/head_level.h): the per-head reduction of KVzip scores, head-level
// selection, calibration (prefill + the kvzip scorer + max per head) and what a head-level cache
// records; compress() runs the compression itself (method kvzip-head).
#include "compress/head_level.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <string>

#include "common/error.h"
#include "compress/detail/scorers.h"
#include "compress/learned_scorer.h"

namespace kvzip::compress {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

}  // namespace

void check_head_scores(std::span<const float> head_scores, const model::CacheShape& shape,
                       const char* who) {
  const size_t n = size_t(shape.n_layers) * shape.n_kv_heads;
  if (head_scores.size() != n)
    throw Error(Errc::invalid_argument,
                std::string(who) + ": " + std::to_string(head_scores.size()) +
                    " head scores for a model with L·Hkv = " + std::to_string(shape.n_layers) +
                    "·" + std::to_string(shape.n_kv_heads) + " = " + std::to_string(n) +
                    " KV heads; calibrate this model");
  for (size_t i = 0; i < n; ++i)
    if (std::isnan(head_scores[i]))
      throw Error(Errc::invalid_argument,
                  std::string(who) + ": head score " + std::to_string(i) + " is NaN");
}

std::vector<float> max_per_head(const DocumentScores& scores) {
  const size_t H = size_t(scores.shape.n_layers) * scores.shape.n_kv_heads, n_c = scores.n_doc;
  if (scores.values.size() != H * n_c)
    throw Error(Errc::invalid_argument, "max_per_head: " + std::to_string(scores.values.size()) +
                                            " scores for L·Hkv·n_c = " + std::to_string(H * n_c));
  std::vector<float> out(H, -std::numeric_limits<float>::infinity());
  for (size_t i = 0; i < H; ++i)
    for (size_t j = 0; j < n_c; ++j) {
      const float v = scores.values[i * n_c + j];
      if (std::isnan(v))  // std::max would silently skip it
        throw Error(Errc::invalid_argument,
                    "max_per_head: score " + std::to_string(i * n_c + j) + " (layer " +
                        std::to_string(i / scores.shape.n_kv_heads) + ", head " +
                        std::to_string(i % scores.shape.n_kv_heads) + ", row " + std::to_string(j) +
                        ") is NaN");
      out[i] = std::max(out[i], v);
    }
  return out;
}

DocumentScores broadcast_head_scores(std::span<const float> head_scores,
                                     const model::CacheShape& shape, uint32_t n_prefix,
                                     uint32_t n_doc) {
  check_head_scores(head_scores, shape, "head-level scores");
  DocumentScores s;
  s.shape = shape;
  s.n_prefix = n_prefix;
  s.n_doc = n_doc;
  s.values.resize(head_scores.size() * n_doc);
  for (size_t i = 0; i < head_scores.size(); ++i)
    std::fill_n(s.values.begin() + i * n_doc, n_doc, head_scores[i]);
  return s;
}

void check_method_name(std::string_view method) {
  std::vector<std::string> known = scorer_names();
  known.push_back(kHeadLevelMethod);
  known.push_back(kLearnedMethod);
  if (std::find(known.begin(), known.end(), method) != known.end()) return;
  std::string list;
  for (const std::string& n : known) list += (list.empty() ? "" : ", ") + n;
  throw Error(Errc::invalid_argument,
              "unknown compression method '" + std::string(method) + "'; known methods: " + list);
}

uint32_t heads_kept(double head_ratio, uint32_t n_heads) {
  check_ratio(head_ratio);
  return static_cast<uint32_t>(std::min<long long>(n_heads, std::llround(head_ratio * n_heads)));
}

Selection select_heads(const DocumentScores& scores, double head_ratio, uint32_t window) {
  const std::vector<float> head = max_per_head(scores);
  check_head_scores(head, scores.shape, "select_heads");
  const uint32_t H = static_cast<uint32_t>(head.size()), n_c = scores.n_doc;
  const uint32_t k = heads_kept(head_ratio, H);
  // Rank: higher score first, then lower (layer, head) index (the tie policy of select_rows).
  std::vector<uint32_t> order(H);
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return head[a] > head[b]; });
  std::vector<uint8_t> whole(H, 0);
  for (uint32_t i = 0; i < k; ++i) whole[order[i]] = 1;

  Selection sel;
  sel.total_doc = uint64_t(H) * n_c;
  sel.keep.resize(H);
  const uint32_t n_p = scores.n_prefix, tail = std::min(window, n_c);
  for (uint32_t i = 0; i < H; ++i) {
    const uint32_t first = whole[i] ? 0 : n_c - tail;  // first kept document row
    std::vector<uint32_t>& rows = sel.keep[i];
    rows.resize(n_p + (n_c - first));
    std::iota(rows.begin(), rows.begin() + n_p, 0u);
    std::iota(rows.begin() + n_p, rows.end(), n_p + first);
    sel.kept_doc += n_c - first;
  }
  sel.achieved_ratio = sel.total_doc ? double(sel.kept_doc) / double(sel.total_doc) : 1.0;
  // Hybrid models: local layers keep their reachable window whichever heads are whole (their
  // heads still count in the head budget: a head score file ranks every head).
  keep_local_windows(scores, sel);
  return sel;
}

namespace {

class HeadLevelScorer final : public Scorer {
 public:
  explicit HeadLevelScorer(std::vector<float> head_scores) : head_(std::move(head_scores)) {}
  std::string name() const override { return kHeadLevelMethod; }
  MethodParams params() const override { return {{"level", "head"}}; }
  DocumentScores score(const ScoreInput& in) override {
    detail::check_score_input(in, kHeadLevelMethod);
    DocumentScores s = broadcast_head_scores(head_, in.cache->shape(), in.n_prefix,
                                             static_cast<uint32_t>(in.document.size()));
    set_hybrid_layout(s, in.forward->config());
    return s;
  }

 private:
  std::vector<float> head_;  // (L, Hkv)
};

}  // namespace

std::unique_ptr<Scorer> make_head_level_scorer(std::vector<float> head_scores) {
  return std::make_unique<HeadLevelScorer>(std::move(head_scores));
}

CalibrateResult calibrate_heads(model::Forward& forward, std::span<const int32_t> prefix,
                                std::span<const int32_t> document, const ScorerOptions& scorer,
                                const prefill::PrefillOptions& prefill) {
  if (document.empty())
    throw Error(Errc::invalid_argument,
                "calibrate: the calibration document has no tokens; give a text of some length "
                "(a few thousand tokens is typical)");
  std::unique_ptr<Scorer> kvzip = make_scorer("kvzip", scorer);
  prefill::check_fits_context(forward.config(), prefix.size(), document.size(),
                              prefill.answer_room);
  prefill::PrefillOptions po = prefill;
  po.scoring_room =
      std::max(po.scoring_room, kvzip->appended_rows(static_cast<uint32_t>(document.size())));
  prefill::PrefillResult pre = prefill::prefill_document(forward, prefix, document, po);
  const auto t = Clock::now();
  const DocumentScores scores =
      kvzip->score(ScoreInput{&forward, &pre.cache, pre.n_prefix, document});
  CalibrateResult r;
  r.scoring_s = seconds_since(t);
  r.shape = scores.shape;
  r.head_scores = max_per_head(scores);
  r.n_prefix = pre.n_prefix;
  r.n_doc = pre.n_doc;
  r.prefill_s = pre.seconds;
  return r;
}

MethodParams head_level_params(double head_ratio, uint32_t n_heads, uint32_t window,
                               double doc_ratio, const MethodParams& source) {
  MethodParams params = {
      {"level", "head"},
      {"head_ratio", number(head_ratio)},
      {"heads_kept",
       std::to_string(heads_kept(head_ratio, n_heads)) + "/" + std::to_string(n_heads)},
      {"window", std::to_string(window)},
      {"doc_ratio", number(doc_ratio)},
  };
  params.insert(params.end(), source.begin(), source.end());
  return params;
}

}  // namespace kvzip::compress
