// Composition of several compressed documents into one context (spec/kvzip_format.md "Composing
// caches"): [first cache's prefix ; document 1's kept rows ; separator ; document 2's kept rows ;
// ... ; question]. Every document keeps its stored rows (shared, read-only:
// cache/composed_cache.h); what is computed per composition is small: the separator rows (a blank
// line by default, each seeing every document before it) and, with ComposeOptions::blend, a
// fraction of every later document's tokens recomputed with the earlier documents in view, which
// restores some of the attention across documents that separate compression could not see
// (CacheBlend, EuroSys '25, does this for full caches). Rows to recompute are chosen by how much
// their values at layer 1 change when the earlier documents are in view: a probe of the first two
// layers over the document's tokens with and without them. Models with sliding-window layers
// (Gemma 3) compose too: their local layers see by composed position (cache/composed_cache.h,
// ComposedWindow).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cache/composed_cache.h"
#include "cache/kv_base.h"
#include "format/format.h"
#include "model/forward.h"
#include "tokenizer/tokenizer.h"

namespace kvzip::loader {

// Which of a later document's tokens the recompute (ComposeOptions::blend) takes.
//  - deviation: those whose layer-1 values change most when the earlier documents are in view (a
//    probe of the first two layers over the document, with and without them);
//  - sink: the document's first tokens, which its standalone prefill made attention sinks (EPIC's
//    LegoLink, 2024); no probe;
//  - sink-deviation: the first half of the budget (rounded up) as sink, the rest by deviation among
//    the tokens after those.
enum class BlendRule : uint8_t { deviation, sink, sink_deviation };

// "deviation", "sink", "sink-deviation"; another name: Errc::invalid_argument listing them.
BlendRule parse_blend_rule(std::string_view name);
const char* blend_rule_name(BlendRule rule);
inline constexpr const char* kBlendRuleNames = "deviation, sink, sink-deviation";

// The `pick` tokens of an n-token document that `rule` recomputes, as ascending indices; `change`
// is each token's value change (BlendRule::deviation), read only by the rules that use it (sink
// takes an empty span). Ties go to the earlier token. pick > n: Errc::invalid_argument.
std::vector<uint32_t> select_recomputed(BlendRule rule, std::span<const double> change, uint32_t n,
                                        uint32_t pick);
inline bool rule_probes(BlendRule rule) { return rule != BlendRule::sink; }

// The fraction a model's compositions recompute when none is asked for, by architecture, from the
// needle grid and the library's answers (docs/composing.md, "The default per model"): llama 0.5
// (SmolLM2 needs it on the needle grid: 7 of 8 finds; none smaller found more), any other 0.3
// (Qwen2.5 finds every needle without recompute, but its answers over retrieved paragraphs keep
// 5 points more of the joint prefill's at 0.3; Gemma 3 finds as many at 0.3 as at 0.5).
double default_blend(std::string_view arch);

struct ComposeOptions {
  // Fraction of every later document's tokens recomputed with the documents before it in view
  // (their rows in every layer and head replaced by, or added as, fresh rows). 0: none. Unset:
  // default_blend of the model's architecture.
  std::optional<double> blend;
  BlendRule rule = BlendRule::deviation;  // which tokens the blend recomputes
  // Keep each later document's own prefix rows (template opener, system prompt) as extra attention
  // sinks, at the document's shifted positions. false: only the first document's prefix is seen.
  bool doc_prefix = false;
  std::string separator = "\n\n";  // text between documents, computed at composition time
  uint32_t max_docs = 16;          // more caches than this: Errc::invalid_argument
  // Tokens per forward chunk of the recompute (ForwardOptions::chunk is a question's: short
  // chunks for one numeric path with the server's steps). The composition is the same for
  // `kvzip query` and `kvzip serve`, which both compose with this.
  uint32_t build_chunk = 512;
};

struct ComposeStats {
  uint32_t docs = 0;
  uint64_t rows = 0;              // rows attended per question token over all (l, h)
  uint32_t separator_tokens = 0;  // per separator
  uint64_t recomputed = 0;        // tokens recomputed over all documents
  uint32_t length = 0;            // composed length: the first question token's position
  double ms = 0.0;                // time to compose (separators, probes, recompute)
  double separator_ms = 0.0;      // of which forward passes of separators only
  double probe_ms = 0.0;          // the probes that choose the tokens to recompute
  double recompute_ms = 0.0;      // the recompute passes (with the separator each one carries)
};

// Throws Errc::model_mismatch or Errc::invalid_argument naming the first cache (1-based) that
// cannot follow the first one: another model fingerprint (unless force), cache shape, RoPE or
// sliding-window layers, query template or suffix template. `names` label the caches in messages.
void check_composable(const std::vector<const format::CacheHeader*>& headers,
                      const std::vector<std::string>& names, bool force);

// Where each document lands, and the composed length, without building anything.
struct ComposePlan {
  std::vector<model::ComposedDoc> docs;  // base pointers unset
  std::vector<int32_t> separator;        // separator tokens
  uint32_t length = 0;
};
ComposePlan plan_composition(const std::vector<const format::CacheHeader*>& headers,
                             const model::Tokenizer& tokenizer, const ComposeOptions& options);

// Builds the composed view over `bases` (one per header, shared, outliving the result) with the
// CPU forward pass `forward` of their model. Errc::invalid_argument for fewer than 2 or more than
// max_docs caches, a blend outside [0, 1], or a composed length that leaves no room in the model's
// context (max_context) for a question.
std::unique_ptr<model::ComposedCache> compose(
    model::Forward& forward, const model::Tokenizer& tokenizer,
    const std::vector<const format::CacheHeader*>& headers,
    const std::vector<const model::KvBase*>& bases, const ComposeOptions& options,
    ComposeStats* stats = nullptr);

}  // namespace kvzip::loader
