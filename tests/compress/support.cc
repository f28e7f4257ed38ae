// Test helpers for compress/ and the prefill (see support.h): the query recorder, ScoredDocument
// and the option-refusal check.
#include "tests/compress/support.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <string>

#include "common/error.h"
#include "model/prefill.h"
#include "tests/support/random_weights.h"

namespace kvzip::test {

model::TraceFn QueryRecorder::trace_fn() {
  return [this](const model::TraceTensor& t) {
    if (std::strcmp(t.name, "q_rope") != 0) return;
    if (q.size() <= size_t(t.layer)) q.resize(t.layer + 1);
    std::vector<float>& dst = q[t.layer];
    const size_t row0 = t.first_position - first;
    dst.resize(std::max(dst.size(), (row0 + t.rows) * t.cols));
    std::memcpy(dst.data() + row0 * t.cols, t.data, size_t(t.rows) * t.cols * sizeof(float));
  };
}

compress::DocumentScores ScoredDocument::score(compress::Scorer& scorer) {
  rec.Hq = cfg.n_heads;
  rec.D = cfg.head_dim;
  rec.clear(0);
  model::Forward fwd(w, model::ForwardOptions{2, 8, rec.trace_fn()});
  prefill::PrefillOptions po;
  po.chunk = prefill_chunk;
  po.observer = scorer.prefill_observer(fwd, n_p, uint32_t(doc.size()));
  prefill::PrefillResult pre = prefill::prefill_document(fwd, prefix, doc, po);
  compress::DocumentScores s = scorer.score(compress::ScoreInput{&fwd, &pre.cache, n_p, doc});
  cache = pre.cache;
  return s;
}

bool ScoredDocument::unobserved_refused(std::string_view method) const {
  auto scorer = compress::make_scorer(method, compress::ScorerOptions{});
  model::Forward fwd(w, model::ForwardOptions{1, 16, {}});
  prefill::PrefillResult pre = prefill::prefill_document(fwd, prefix, doc);
  try {
    scorer->score(compress::ScoreInput{&fwd, &pre.cache, n_p, doc});
  } catch (const Error&) {
    return true;
  }
  return false;
}

compress::ScorerOptions tiny_kvzip_options() {
  compress::ScorerOptions so;
  so.prompts.first = {3, 4, 5};
  so.prompts.next = {6, 7, 8, 9};
  so.prompts.turn_end = {10, 11};
  so.kvzip_chunk = 16;
  so.kvzip_bf16 = false;  // fp32 passes: the tests compare scores and caches with fp32 references
  return so;
}

void check_context_refusal(const Error& e, std::initializer_list<const char*> needles) {
  const std::string m = e.what();
  INFO(m);
  CHECK(e.code() == Errc::invalid_argument);
  for (const char* n : needles) CHECK(m.find(n) != std::string::npos);
}

bool scorer_refuses(std::string_view method, const compress::ScorerOptions& options,
                    const char* what) {
  try {
    compress::make_scorer(method, options);
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.code() == Errc::invalid_argument);
    CHECK(std::string(e.what()).find(what) != std::string::npos);
    return true;
  }
  return false;
}

}  // namespace kvzip::test
