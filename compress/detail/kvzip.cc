// The KVzip scorer (methods §1 steps 2-6): for each document chunk c_t of m tokens, the input
// R_t = [prompt_t ; S ; c_t] runs through the model with the full cache present; at every layer
// the observer computes, per KV head, the softmax of each R_t query row over the LOCAL key axis
// K̄ = prefix ⊕ chunk t ⊕ R_t's own keys (causal inside R_t), and keeps for each chunk key the max
// over the GQA group's rows and all R_t positions. R_t is then rolled back. R_t may be longer than
// the forward's chunk: each observer call then sees R_t rows from its first row up to each query.
#include <algorithm>
#include <string>

#include "common/error.h"
#include "compress/detail/attn_stats.h"
#include "compress/detail/scorers.h"
#include "kernels/thread_pool.h"

namespace kvzip {

ReconstructionPrompts reconstruction_prompts(const ChatTemplate& chat) {
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
    throw Error(Errc::invalid_argument,
                "reconstruction_input: chunk [" + std::to_string(begin) + ", " +
                    std::to_string(end) + ") is empty or outside the document of " +
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

namespace detail {
namespace {

// Observes the forward of one R_t and max-reduces the local attention into the chunk's scores.
class KvzipObserver final : public AttentionObserver {
 public:
  KvzipObserver(DocumentScores& scores, ThreadPool* pool) : s_(scores), pool_(pool) {}

  // Chunk [begin, end) of the document; R_t's first row is `r0` (= n_prefix + n_doc).
  void set_chunk(uint32_t begin, uint32_t end, uint32_t r0) {
    begin_ = begin;
    end_ = end;
    r0_ = r0;
  }

  void on_attention(const AttentionObservation& obs) override {
    const uint32_t Hkv = obs.Hkv, D = obs.D, n_p = s_.n_prefix, m = end_ - begin_;
    KeyAxis axes[kMaxKvHeads];
    std::vector<KeyAxis> many;
    KeyAxis* ax = axes;
    if (Hkv > kMaxKvHeads) {
      many.resize(Hkv);
      ax = many.data();
    }
    for (uint32_t h = 0; h < Hkv; ++h) {
      const KvHeadView v = obs.cache->view(obs.layer, h);
      // Dense cache: row == position. The T new rows are the view's last rows.
      const uint32_t p0 = v.len - obs.T;
      KVZIP_ASSERT(p0 >= r0_ && obs.positions[0] == p0);
      ax[h].ranges[0] = KeyRange{v.k, n_p};
      ax[h].ranges[1] = KeyRange{v.k + size_t(n_p + begin_) * D, m};
      ax[h].ranges[2] = KeyRange{v.k + size_t(r0_) * D, p0 - r0_ + obs.T};
      ax[h].n_ranges = 3;
      ax[h].causal_base = p0 - r0_;
    }
    AttnStatsArgs a;
    a.q = obs.q;
    a.T = obs.T;
    a.Hq = obs.Hq;
    a.Hkv = Hkv;
    a.D = D;
    a.scale = obs.scale;
    a.t0 = 0;
    a.t1 = obs.T;
    a.axes = ax;
    a.col0 = n_p;
    a.col1 = n_p + m;
    a.reduce = Reduce::Max;
    a.out = s_.values.data() + size_t(obs.layer) * Hkv * s_.n_doc + begin_;
    a.out_stride = s_.n_doc;
    attention_stats(pool_, a);
  }

 private:
  static constexpr uint32_t kMaxKvHeads = 16;
  DocumentScores& s_;
  ThreadPool* pool_;
  uint32_t begin_ = 0, end_ = 0, r0_ = 0;
};

class KvzipScorer final : public Scorer {
 public:
  explicit KvzipScorer(const ScorerOptions& o) : opt_(o) {}
  std::string name() const override { return "kvzip"; }
  MethodParams params() const override {
    return {{"chunk", std::to_string(opt_.kvzip_chunk)},
            {"hint", std::to_string(opt_.kvzip_hint)},
            {"normalization", "local"},
            {"reduce", "max over GQA group and reconstruction positions"}};
  }

  DocumentScores score(const ScoreInput& in) override {
    check_score_input(in, "kvzip");
    DocumentScores s = make_scores(in, 0.0f);  // probabilities >= 0: 0 is the max's identity
    const uint32_t n_c = s.n_doc, full = in.n_prefix + n_c, m = opt_.kvzip_chunk;
    KvzipObserver obs(s, &in.forward->pool());
    for (uint32_t begin = 0; begin < n_c; begin += m) {
      const uint32_t end = std::min(n_c, begin + m);
      const std::vector<int32_t> r =
          reconstruction_input(opt_.prompts, in.document, begin, end, std::min(opt_.kvzip_hint, m));
      obs.set_chunk(begin, end, full);
      // The forward rolls the cache back itself when it throws.
      in.forward->prefill(*in.cache, r, LogitsMode::None, &obs);
      in.cache->rollback(full);
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
  if (options.kvzip_chunk == 0)
    throw Error(Errc::invalid_argument, "kvzip chunk is 0, expected >= 1 (default 2000)");
  return std::make_unique<KvzipScorer>(options);
}

}  // namespace detail
}  // namespace kvzip
