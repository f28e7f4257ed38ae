// select_sources (library/library.h): which of a search's hits go into one composition, so that
// the composed documents, the question and the answer fit the model's context.
#include "common/error.h"
#include "library/library.h"
#include "loader/compose.h"
#include "loader/loader.h"
#include "model/model.h"

namespace kvzip::library {

Selection select_sources(const model::Model& model, const std::vector<Hit>& hits,
                         std::string_view question, uint32_t answer_tokens, uint32_t max_docs) {
  Selection sel;
  std::vector<format::CacheHeader> headers;  // of the sources taken (document text dropped)
  headers.reserve(hits.size());
  auto leave = [&](const Hit& h, std::string why) {
    sel.left_out.push_back(h);
    sel.why.push_back(std::move(why));
  };
  const uint32_t max_context = model.config().max_context;
  loader::ComposeOptions co;
  for (const Hit& h : hits) {
    if (sel.sources.size() >= max_docs) {
      leave(h, "more caches than a composition takes (" + std::to_string(max_docs) + ")");
      continue;
    }
    format::CacheHeader hd;
    try {
      hd = format::CacheReader::open(h.path).header();
      hd.document_text.clear();
      if (!hd.model.same_model(model.fingerprint()))
        throw Error(Errc::model_mismatch, "written by another model");
      std::vector<const format::CacheHeader*> ptrs;
      for (const auto& x : headers) ptrs.push_back(&x);
      ptrs.push_back(&hd);
      if (ptrs.size() > 1)
        loader::check_composable(ptrs, std::vector<std::string>(ptrs.size(), h.id), false);
      const uint32_t length = loader::plan_composition(ptrs, model.tokenizer(), co).length;
      const size_t q = loader::question_tokens(model.tokenizer(), *ptrs[0], question).size();
      if (uint64_t(length) + q + answer_tokens > max_context) {
        leave(h, "does not fit the context of " + std::to_string(max_context) +
                     " tokens with the caches before it, "
                     "the question and " +
                     std::to_string(answer_tokens) + " answer tokens");
        continue;
      }
      sel.length = length;
    } catch (const Error& e) {
      leave(h, e.what());
      continue;
    }
    headers.push_back(std::move(hd));
    sel.sources.push_back(h);
  }
  return sel;
}

}  // namespace kvzip::library

namespace kvzip::library {

Selection retrieve(const Index& index, const model::Model& model, std::string_view question,
                   uint32_t top_k, uint32_t answer_tokens) {
  if (top_k == 0) throw Error(Errc::invalid_argument, "top-k must be at least 1");
  const ModelFingerprint& fp = model.fingerprint();
  const std::vector<Hit> hits = index.search(question, top_k, &fp);
  if (hits.empty()) {
    const uint32_t mine = index.count(&fp);
    if (mine == 0) {
      const uint32_t all = index.count();
      throw Error(Errc::not_found,
                  index.dir() + " holds no cache of this model (" + fp.arch + " \"" + fp.name +
                      "\")" +
                      (all ? "; its " + std::to_string(all) + " indexed caches are of other models"
                           : "; run `kvzip index` after adding caches"));
    }
    throw Error(Errc::not_found, "no cache of " + index.dir() + " matches a word of the question");
  }
  Selection sel = select_sources(model, hits, question, answer_tokens);
  if (sel.sources.empty())
    throw Error(Errc::invalid_argument, "none of the " + std::to_string(hits.size()) +
                                            " caches found can answer: \"" + sel.left_out[0].id +
                                            "\" " + sel.why[0]);
  return sel;
}

}  // namespace kvzip::library
