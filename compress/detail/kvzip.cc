// The KVzip scorer (spec/methods.md §1 steps 2-6): for each document chunk c_t of m tokens, the
// input R_t = [prompt_t ; S ; c_t] runs through the model with the full cache present; at every
// layer the attention kernel computes, per KV head, the softmax of each R_t query row over the
// LOCAL key axis K̄ = prefix ⊕ chunk t ⊕ R_t's own keys (causal inside R_t), and keeps for each
// chunk key the max over the GQA group's rows and all R_t positions (kernels/attention.h
// LocalMaxProb). R_t is then rolled back. R_t may be longer than the forward's chunk: each forward
// chunk then sees R_t rows from its first row up to each query. Query-aware
// (ScorerOptions::kvzip_queries): each known question is run after R_t in the same way and
// max-combined into the chunk's scores.
#include <algorithm>
#include <string>

#include "common/error.h"
#include "compress/detail/scorers.h"
#include "model/forward.h"

namespace kvzip::compress {

namespace detail {
namespace {

// Asks the forward's attention kernel, at every layer of every chunk of one R_t, for the local
// statistics: it forms the logits of R_t's queries against every cached row anyway, so the
// scores cost no second q·k pass. Dense cache: row == position, R_t's rows start at r0.
class KvzipObserver final : public model::AttentionObserver {
 public:
  explicit KvzipObserver(DocumentScores& scores) : s_(scores) {}
  // Sliding-window layers are not scored: their reconstruction queries cannot reach the chunk,
  // and selection keeps their reachable rows whatever the scores (compress/selection.h).

  // Chunk [begin, end) of the document; R_t's first row is `r0` (= n_prefix + n_doc).
  void set_chunk(const model::KvCache* cache, uint32_t begin, uint32_t end, uint32_t r0) {
    cache_ = cache;
    begin_ = begin;
    end_ = end;
    r0_ = r0;
  }

  bool request_local_stats(uint32_t layer, uint32_t T, kernels::LocalMaxProb* r) override {
    if (s_.is_local(layer)) return false;
    const uint32_t n_p = s_.n_prefix;
    // The T new rows are the views' last rows; R_t's earlier rows precede them.
    KVZIP_ASSERT(cache_->view(layer, 0).len - T >= r0_);
    r->prefix_end = n_p;
    r->target_begin = n_p + begin_;
    r->target_end = n_p + end_;
    r->own_begin = r0_;
    r->out = s_.values.data() + size_t(layer) * s_.shape.n_kv_heads * s_.n_doc + begin_;
    r->out_stride = s_.n_doc;
    return true;
  }
  void on_attention(const model::AttentionObservation&) override {}  // the kernel did the work

 private:
  DocumentScores& s_;
  const model::KvCache* cache_ = nullptr;
  uint32_t begin_ = 0, end_ = 0, r0_ = 0;
};

class KvzipScorer final : public Scorer {
 public:
  explicit KvzipScorer(const ScorerOptions& o) : opt_(o) {}
  std::string name() const override { return "kvzip"; }
  MethodParams params() const override {
    MethodParams p{{"chunk", std::to_string(opt_.kvzip_chunk)},
                   {"hint", std::to_string(opt_.kvzip_hint)},
                   {"normalization", "local"},
                   {"reduce", "max over GQA group and reconstruction positions"}};
    if (!opt_.kvzip_queries.empty())
      p.emplace_back("queries", std::to_string(opt_.kvzip_queries.size()) +
                                    " known questions, max-combined with the reconstruction");
    return p;
  }

  // The longest R_t: its prompt, the hint, the end of the turn and a whole chunk.
  uint32_t appended_rows(uint32_t n_doc) const override {
    const uint32_t m = opt_.kvzip_chunk;
    const size_t prompt = std::max(opt_.prompts.first.size(),
                                   opt_.prompts.next.size() + std::min(opt_.kvzip_hint, m));
    return static_cast<uint32_t>(prompt + opt_.prompts.turn_end.size() + std::min(m, n_doc));
  }

  DocumentScores score(const ScoreInput& in) override {
    check_score_input(in, "kvzip");
    DocumentScores s = make_scores(in, 0.0f);  // probabilities >= 0: 0 is the max's identity
    const uint32_t n_c = s.n_doc, full = in.n_prefix + n_c, m = opt_.kvzip_chunk;
    KvzipObserver obs(s);
    const model::PromptBf16Scope bf16(*in.forward, opt_.kvzip_bf16);
    for (uint32_t begin = 0; begin < n_c; begin += m) {
      const uint32_t end = std::min(n_c, begin + m);
      const std::vector<int32_t> r =
          reconstruction_input(opt_.prompts, in.document, begin, end, std::min(opt_.kvzip_hint, m));
      obs.set_chunk(in.cache, begin, end, full);
      // The forward rolls the cache back itself when it throws.
      in.forward->prefill(*in.cache, r, model::LogitsMode::None, &obs);
      in.cache->rollback(full);
      for (const std::vector<int32_t>& q : opt_.kvzip_queries) {  // same chunk, same observer
        in.forward->prefill(*in.cache, q, model::LogitsMode::None, &obs);
        in.cache->rollback(full);
      }
    }
    return s;
  }

 private:
  ScorerOptions opt_;
};

}  // namespace

std::unique_ptr<Scorer> make_kvzip_scorer(const ScorerOptions& options) {
  if (options.prompts.first.empty() || options.prompts.next.empty() ||
      options.prompts.turn_end.empty())
    throw Error(Errc::invalid_argument,
                "kvzip needs its reconstruction prompts (ScorerOptions.prompts is empty); build "
                "them with reconstruction_prompts(model.chat())");
  require_positive("kvzip chunk", options.kvzip_chunk, 2000);
  for (const std::vector<int32_t>& q : options.kvzip_queries)
    if (q.empty())
      throw Error(Errc::invalid_argument, "kvzip: a query-aware question has no tokens");
  return std::make_unique<KvzipScorer>(options);
}

}  // namespace detail
}  // namespace kvzip::compress
