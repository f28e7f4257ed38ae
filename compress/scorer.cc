// scorer_names and make_scorer (scorer.h): the factory over every scorer of compress/detail/; and
// the KVzip reconstruction inputs (spec/methods.md §1 step 3) the kvzip scorer is fed.
#include "compress/scorer.h"

#include <algorithm>
#include <string>

#include "common/error.h"
#include "compress/detail/scorers.h"
#include "compress/learned_scorer.h"

namespace kvzip::compress {

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
  if (method == kLearnedMethod)
    return make_learned_scorer(options.learned, options.learned_source, options.kvzap_window);
  std::string known;
  for (const std::string& n : scorer_names()) known += (known.empty() ? "" : ", ") + n;
  throw Error(Errc::invalid_argument,
              "unknown compression method '" + std::string(method) + "'; known methods: " + known);
}

ReconstructionPrompts reconstruction_prompts(const model::ChatTemplate& chat) {
  ReconstructionPrompts p;
  p.first = chat.encode_document(kRepeatFirstPrompt);
  p.next = chat.encode_document(kRepeatNextPrompt);
  p.turn_end = chat.suffix("");
  return p;
}

std::vector<int32_t> reconstruction_input(const ReconstructionPrompts& prompts,
                                          std::span<const int32_t> document, uint32_t begin,
                                          uint32_t end, uint32_t hint) {
  if (begin >= end || end > document.size())
    throw Error(Errc::invalid_argument, "reconstruction_input: chunk [" + std::to_string(begin) +
                                            ", " + std::to_string(end) +
                                            ") is empty or outside the document of " +
                                            std::to_string(document.size()) + " tokens");
  std::vector<int32_t> r;
  if (begin == 0) {
    r = prompts.first;
  } else {
    r = prompts.next;
    const uint32_t h0 = begin - std::min(hint, begin);
    r.insert(r.end(), document.begin() + h0, document.begin() + begin);
  }
  r.insert(r.end(), prompts.turn_end.begin(), prompts.turn_end.end());
  r.insert(r.end(), document.begin() + begin, document.begin() + end);
  return r;
}

}  // namespace kvzip::compress
