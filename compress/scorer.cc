// scorer_names and make_scorer (scorer.h): the factory over every scorer of compress/detail/.
#include "compress/scorer.h"

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

}  // namespace kvzip
