// The offline "rkv" scorer (spec/methods.md §4, offline variant for documents). Candidates of
// every (layer, KV head) = the document's rows: the prefix is never scored (always kept) and never
// enters I or R; the last α document tokens are the probe (their queries, recorded during the
// prefill, give the importance) and score +inf. The score itself is model/rkv.h's rkv_scores, the
// one R-KV implementation the decode-time policy uses too: redundancy over all candidates, the
// probe window included. A hybrid model's local (sliding-window) layers are not scored.
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "common/error.h"
#include "compress/detail/scorers.h"
#include "compress/detail/window_queries.h"
#include "model/rkv.h"

namespace kvzip::compress::detail {
namespace {

constexpr float kAlwaysKeep = std::numeric_limits<float>::infinity();

class RkvScorer final : public WindowScorer {
 public:
  RkvScorer(uint32_t window, float lambda, float threshold, uint32_t kernel)
      : WindowScorer(window), lambda_(lambda), threshold_(threshold), kernel_(kernel) {}
  std::string name() const override { return "rkv"; }
  MethodParams params() const override {
    return {{"window", std::to_string(window_)},
            {"lambda", number(lambda_)},
            {"threshold", number(threshold_)},
            {"kernel", std::to_string(kernel_)},
            {"candidates", "document"}};
  }

  DocumentScores score(const ScoreInput& in) override {
    const WindowQueries& rec = observed(in, "rkv");
    DocumentScores s = make_scores(in, kAlwaysKeep);
    const ModelConfig& c = in.forward->config();
    const uint32_t n_p = s.n_prefix, n_c = s.n_doc, a = rec.window();
    const uint32_t Hkv = c.n_kv_heads, G = c.group(), D = c.head_dim;
    if (n_c <= a) return s;  // the whole document is the probe window
    model::RkvParams p;
    p.window = a;
    p.lambda = lambda_;
    p.threshold = threshold_;
    p.kernel = kernel_;
    auto unit = [&](size_t u) {
      const uint32_t l = static_cast<uint32_t>(u / Hkv), h = static_cast<uint32_t>(u % Hkv);
      // Not scored: selection keeps a local layer's reachable rows, and after a trimmed prefill
      // the layer holds only its window, not the n_c candidates read below.
      if (c.is_local(l)) return;
      model::RkvHeadInput hi;
      hi.keys = in.cache->view(l, h).k + size_t(n_p) * D;  // (n_c, D) the candidates
      hi.N = n_c;
      hi.queries = rec.layer_queries(l) + size_t(h) * G * D;
      hi.A = a;
      hi.G = G;
      hi.D = D;
      hi.scale = 1.0f / std::sqrt(static_cast<float>(D));
      hi.q_stride = uint64_t(c.n_heads) * D;
      const std::vector<float> z = model::rkv_scores(hi, p);
      std::copy(z.begin(), z.end(), s.values.begin() + (size_t(l) * Hkv + h) * n_c);
    };
    run_units(in.forward->pool(), size_t(c.n_layers) * Hkv, unit);
    return s;
  }

 private:
  static std::string number(float x) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", double(x));
    return b;
  }
  float lambda_, threshold_;
  uint32_t kernel_;
};

}  // namespace

std::unique_ptr<Scorer> make_rkv_scorer(const ScorerOptions& o) {
  require_positive("rkv window", o.rkv_window, 8);
  if (!(o.rkv_lambda >= 0.0f && o.rkv_lambda <= 1.0f))
    throw Error(Errc::invalid_argument, "rkv lambda is " + std::to_string(o.rkv_lambda) +
                                            ", expected 0 <= lambda <= 1 (default 0.1)");
  if (!(o.rkv_threshold >= -1.0f && o.rkv_threshold <= 1.0f))
    throw Error(Errc::invalid_argument, "rkv similarity threshold is " +
                                            std::to_string(o.rkv_threshold) +
                                            ", expected a cosine in [-1, 1] (default 0.5)");
  require_odd("rkv pooling kernel", o.rkv_kernel, 7);
  return std::make_unique<RkvScorer>(o.rkv_window, o.rkv_lambda, o.rkv_threshold, o.rkv_kernel);
}

}  // namespace kvzip::compress::detail
