// make_scorer, evict and the compress() pipeline (see compress.h). "full" is special-cased: it
// never evicts, whatever ratio was asked, and needs no scoring pass.
#include "compress/compress.h"

#include <chrono>
#include <limits>
#include <string>

#include "common/error.h"
#include "compress/detail/scorers.h"

namespace kvzip {

std::vector<std::string> scorer_names() {
  return {"kvzip", "full", "random", "streaming", "snapkv", "h2o", "rest-kv", "rkv"};
}

std::unique_ptr<Scorer> make_scorer(std::string_view method, const ScorerOptions& options) {
  if (method == "kvzip") return detail::make_kvzip_scorer(options);
  if (method == "full") return detail::make_full_scorer();
  if (method == "random") return detail::make_random_scorer(options);
  if (method == "streaming") return detail::make_streaming_scorer(options);
  if (method == "snapkv") return detail::make_snapkv_scorer(options);
  if (method == "h2o") return detail::make_h2o_scorer(options);
  if (method == "rest-kv") return detail::make_restkv_scorer(options);
  if (method == "rkv") return detail::make_rkv_scorer(options);
  std::string known;
  for (const std::string& n : scorer_names()) known += (known.empty() ? "" : ", ") + n;
  throw Error(Errc::invalid_argument,
              "unknown compression method '" + std::string(method) + "'; known methods: " + known);
}

EvictResult evict(const KvCache& dense, const DocumentScores& scores, const Selection& selection,
                  uint32_t room) {
  const CacheShape shape = dense.shape();
  const uint32_t n_p = scores.n_prefix, n_c = scores.n_doc;
  if (!(shape == scores.shape) || dense.logical_length() != n_p + n_c ||
      selection.keep.size() != size_t(shape.n_layers) * shape.n_kv_heads)
    throw Error(Errc::invalid_argument,
                "evict: the cache (" + std::to_string(dense.logical_length()) +
                    " tokens), the scores (prefix " + std::to_string(n_p) + " + document " +
                    std::to_string(n_c) + ") and the selection do not describe the same document");
  EvictResult r{RaggedKvCache::from_dense(dense, selection.keep, room), {},
                selection.achieved_ratio};
  r.kept_scores.resize(shape.n_layers);
  for (uint32_t l = 0; l < shape.n_layers; ++l)
    for (uint32_t h = 0; h < shape.n_kv_heads; ++h)
      for (uint32_t row : selection.keep[size_t(l) * shape.n_kv_heads + h])
        r.kept_scores[l].push_back(row < n_p ? std::numeric_limits<float>::infinity()
                                             : scores.at(l, h, row - n_p));
  return r;
}

CompressResult compress(Forward& forward, std::span<const int32_t> prefix,
                        std::span<const int32_t> document, const CompressOptions& options) {
  using Clock = std::chrono::steady_clock;
  auto seconds_since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  check_ratio(options.ratio);
  const bool full = options.method == "full";
  const double ratio = full ? 1.0 : options.ratio;
  std::unique_ptr<Scorer> scorer = make_scorer(options.method, options.scorer);
  check_fits_context(forward.config(), prefix.size(), document.size(),
                     options.prefill.answer_room);

  const uint32_t n_p = static_cast<uint32_t>(prefix.size());
  const uint32_t n_c = static_cast<uint32_t>(document.size());
  PrefillOptions po = options.prefill;
  ObserverFanout fan;
  fan.add(options.prefill.observer);
  fan.add(scorer->prefill_observer(forward, n_p, n_c));
  po.observer = fan.empty() ? nullptr : &fan;
  PrefillResult pre = prefill_document(forward, prefix, document, po);

  auto t = Clock::now();
  const DocumentScores scores = scorer->score(ScoreInput{&forward, &pre.cache, n_p, document});
  const double scoring_s = seconds_since(t);

  t = Clock::now();
  const Selection sel = select_rows(scores, ratio, options.level);
  EvictResult ev = evict(pre.cache, scores, sel, options.room);
  MethodParams params = scorer->params();
  params.emplace_back("level", selection_level_name(options.level));
  CompressResult r{std::move(ev.cache), std::move(ev.kept_scores), ratio, ev.achieved_ratio,
                   scorer->name(), std::move(params), n_p, n_c, pre.seconds, scoring_s,
                   seconds_since(t)};
  return r;
}

}  // namespace kvzip
