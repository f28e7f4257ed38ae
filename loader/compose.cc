// Composing compressed documents (see compose.h): checks, placement, separators, selective
// recompute.
#include "loader/compose.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <string>

#include "cache/kv_cache.h"
#include "common/error.h"
#include "kernels/rope.h"
#include "loader/loader.h"

namespace kvzip::loader {
namespace {

std::string hex(uint64_t v) {
  char b[20];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

std::vector<int32_t> ids(std::span<const uint32_t> t) {
  return std::vector<int32_t>(t.begin(), t.end());
}

// Layer-1 values of a document's tokens, alone (after its own prefix, as it was compressed) and in
// the composition (after the documents before it): the squared change per token.
std::vector<double> value_change(model::Forward& forward, model::ComposedCache& cache, uint32_t d,
                                 const format::CacheHeader& h, uint32_t first, uint32_t layer) {
  const std::vector<int32_t> doc = ids(h.document_tokens);
  const uint32_t n = static_cast<uint32_t>(doc.size()),
                 np = static_cast<uint32_t>(h.prefix_length());
  std::vector<uint32_t> pos(n);
  std::iota(pos.begin(), pos.end(), first);
  cache.rows(d, -1, pos);
  const std::vector<float> in_view = forward.layer_values(cache, doc, layer);
  model::KvCache alone(cache.shape(), np + n);
  std::vector<int32_t> seq = ids(h.prefix_tokens);
  seq.insert(seq.end(), doc.begin(), doc.end());
  const std::vector<float> own = forward.layer_values(alone, seq, layer);
  const size_t kvd = size_t(cache.shape().n_kv_heads) * cache.shape().head_dim;
  std::vector<double> change(n, 0.0);
  for (uint32_t j = 0; j < n; ++j)
    for (size_t i = 0; i < kvd; ++i) {
      const double d = double(in_view[j * kvd + i]) - own[(np + j) * kvd + i];
      change[j] += d * d;
    }
  return change;
}

}  // namespace

void check_composable(const std::vector<const format::CacheHeader*>& headers,
                      const std::vector<std::string>& names, bool force) {
  KVZIP_ASSERT(!headers.empty() && names.size() == headers.size());
  const format::CacheHeader& a = *headers[0];
  for (size_t i = 1; i < headers.size(); ++i) {
    const format::CacheHeader& b = *headers[i];
    const std::string who = "cache " + std::to_string(i + 1) + " (" + names[i] + ")";
    const std::string vs = " than cache 1 (" + names[0] + ")";
    if (!force && !a.model.same_model(b.model))
      throw Error(Errc::model_mismatch, who + " was written by another model" + vs + ": " +
                                            b.model.arch + " weights " + hex(b.model.weights_hash) +
                                            " tokenizer " + hex(b.model.tokenizer_hash) + " vs " +
                                            a.model.arch + " weights " + hex(a.model.weights_hash) +
                                            " tokenizer " + hex(a.model.tokenizer_hash) +
                                            "; only caches of one model compose");
    if (a.n_layers != b.n_layers || a.n_kv_heads != b.n_kv_heads || a.head_dim != b.head_dim ||
        a.rope_base != b.rope_base || a.rope_scaling.kind != b.rope_scaling.kind ||
        a.rope_scaling.factor != b.rope_scaling.factor)
      throw Error(Errc::model_mismatch, who + " has another cache shape or RoPE" + vs);
    if (a.local_layers != b.local_layers || a.sliding_window != b.sliding_window ||
        a.rope_local_base != b.rope_local_base)
      throw Error(Errc::model_mismatch, who + " has other sliding-window layers" + vs);
    if (query_template(a) != query_template(b))
      throw Error(Errc::invalid_argument, who + " has another query template" + vs + ": \"" +
                                              query_template(b) + "\" vs \"" + query_template(a) +
                                              "\"");
    if (a.suffix_tokens != b.suffix_tokens)
      throw Error(Errc::invalid_argument,
                  who + " has another suffix template (the tokens after the question)" + vs);
  }
}

double default_blend(std::string_view arch) { return arch == "llama" ? 0.5 : 0.3; }

BlendRule parse_blend_rule(std::string_view name) {
  for (BlendRule r : {BlendRule::deviation, BlendRule::sink, BlendRule::sink_deviation})
    if (name == blend_rule_name(r)) return r;
  std::string m = "unknown blend rule \"";
  m.append(name).append("\"; the rules are ").append(kBlendRuleNames);
  throw Error(Errc::invalid_argument, m);
}

const char* blend_rule_name(BlendRule rule) {
  switch (rule) {
    case BlendRule::deviation: return "deviation";
    case BlendRule::sink: return "sink";
    case BlendRule::sink_deviation: return "sink-deviation";
  }
  return "?";
}

ComposePlan plan_composition(const std::vector<const format::CacheHeader*>& headers,
                             const model::Tokenizer& tokenizer, const ComposeOptions& o) {
  ComposePlan plan;
  plan.separator = tokenizer.encode(o.separator, /*parse_special=*/false);
  uint64_t end = headers[0]->logical_length();
  plan.docs.push_back(model::ComposedDoc{nullptr, 0, 0});
  for (size_t d = 1; d < headers.size(); ++d) {
    const format::CacheHeader& h = *headers[d];
    const uint64_t start = end + plan.separator.size();  // the document's first token
    model::ComposedDoc doc;
    doc.shift = static_cast<uint32_t>(start - h.prefix_length());
    doc.skip_below = o.doc_prefix ? 0 : static_cast<uint32_t>(h.prefix_length());
    doc.first = static_cast<uint32_t>(start);
    plan.docs.push_back(doc);
    end = start + h.document_tokens.size();
    if (end > UINT32_MAX)
      throw Error(Errc::invalid_argument, "compose: the composed context exceeds 2^32 positions");
  }
  plan.length = static_cast<uint32_t>(end);
  return plan;
}

namespace {

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// What compose takes: 2 to max_docs caches, a blend in [0, 1].
void check_composition(const std::vector<const format::CacheHeader*>& headers,
                       const ComposeOptions& o) {
  const size_t K = headers.size();
  if (K < 2 || K > o.max_docs)
    throw Error(Errc::invalid_argument, "compose: " + std::to_string(K) +
                                            " caches; a composition takes 2 to " +
                                            std::to_string(o.max_docs));
  if (o.blend && !(*o.blend >= 0.0 && *o.blend <= 1.0))
    throw Error(Errc::invalid_argument,
                "compose: blend " + std::to_string(*o.blend) + " is outside [0, 1]");
}

// Document d's `pick` tokens chosen by o.rule (with the probe of value_change where the rule
// reads it, timed into probe_ms): their positions and tokens go to pos and toks, their stored rows
// give way.
void pick_recomputed(model::Forward& forward, model::ComposedCache& cache, uint32_t d,
                     const format::CacheHeader& h, uint32_t first, uint32_t pick, BlendRule rule,
                     std::vector<uint32_t>& pos, std::vector<int32_t>& toks, double& probe_ms) {
  const uint32_t n = static_cast<uint32_t>(h.document_tokens.size());
  std::vector<double> change;
  if (rule_probes(rule) && pick < n) {
    const auto t = std::chrono::steady_clock::now();
    change = value_change(forward, cache, d, h, first, 1);
    probe_ms += ms_since(t);
  }
  const std::vector<uint32_t> order = pick < n ? select_recomputed(rule, change, n, pick)
                                               : select_recomputed(BlendRule::sink, {}, n, n);
  std::vector<uint32_t> stored(pick);
  for (uint32_t i = 0; i < pick; ++i) {
    stored[i] = static_cast<uint32_t>(h.prefix_length()) + order[i];
    pos.push_back(first + order[i]);
    toks.push_back(static_cast<int32_t>(h.document_tokens[order[i]]));
  }
  cache.skip(d, stored);
}

// The `pick` indices of [from, n) with the largest change, ties to the earlier one, appended to
// out.
void top_by_change(std::span<const double> change, uint32_t from, uint32_t n, uint32_t pick,
                   std::vector<uint32_t>& out) {
  std::vector<uint32_t> order(n - from);
  std::iota(order.begin(), order.end(), from);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return change[a] > change[b]; });
  out.insert(out.end(), order.begin(), order.begin() + pick);
}

}  // namespace

std::vector<uint32_t> select_recomputed(BlendRule rule, std::span<const double> change, uint32_t n,
                                        uint32_t pick) {
  if (pick > n)
    throw Error(Errc::invalid_argument, "compose: " + std::to_string(pick) +
                                            " tokens to recompute of " + std::to_string(n));
  // Sink-style rules take the document's first tokens: where its standalone prefill put the
  // attention mass that, composed, belongs to the earlier documents' sinks.
  const uint32_t sinks = rule == BlendRule::sink             ? pick
                         : rule == BlendRule::sink_deviation ? (pick + 1) / 2
                                                             : 0;
  std::vector<uint32_t> out(sinks);
  std::iota(out.begin(), out.end(), 0u);
  if (pick > sinks) {
    KVZIP_ASSERT(change.size() == n);
    top_by_change(change, sinks, n, pick - sinks, out);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::unique_ptr<model::ComposedCache> compose(
    model::Forward& forward, const model::Tokenizer& tokenizer,
    const std::vector<const format::CacheHeader*>& headers,
    const std::vector<const model::KvBase*>& bases, const ComposeOptions& o, ComposeStats* stats) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t K = headers.size();
  KVZIP_ASSERT(bases.size() == K);
  check_composition(headers, o);
  ComposePlan plan = plan_composition(headers, tokenizer, o);
  const ModelConfig& cfg = forward.config();
  if (plan.length >= cfg.max_context)
    throw Error(Errc::invalid_argument,
                "compose: the " + std::to_string(K) + " documents fill " +
                    std::to_string(plan.length) + " positions, past the model's context of " +
                    std::to_string(cfg.max_context) + "; compose fewer or shorter documents");
  for (size_t d = 0; d < K; ++d) plan.docs[d].base = bases[d];
  const std::vector<float> inv_freq =
      kernels::rope_inv_freq(cfg.head_dim, cfg.rope_base, cfg.rope_scaling);
  auto cache = std::make_unique<model::ComposedCache>(plan.docs, inv_freq, plan.length,
                                                      model::composed_window(cfg));
  const uint32_t S = static_cast<uint32_t>(plan.separator.size());
  std::vector<uint32_t> first(K),
      pick(K, 0);  // each document's first composed position, tokens to recompute
  first[0] = static_cast<uint32_t>(headers[0]->prefix_length());
  const double blend = o.blend.value_or(default_blend(cfg.arch));
  for (uint32_t d = 1; d < K; ++d) {
    first[d] = plan.docs[d].first;
    pick[d] =
        static_cast<uint32_t>(std::llround(blend * double(headers[d]->document_tokens.size())));
  }
  auto separator_at = [&](uint32_t d, std::vector<uint32_t>& pos, std::vector<int32_t>& tokens) {
    for (uint32_t i = 0; i < S; ++i)
      pos.push_back(first[d] - S + i);  // the separator before document d
    tokens.insert(tokens.end(), plan.separator.begin(), plan.separator.end());
  };
  uint64_t recomputed = 0;
  double sep_ms = 0, probe_ms = 0, recompute_ms = 0;
  // Every forward pass is a few passes of the thread pool per layer, whatever its length, so the
  // steps are merged where the result is the same: with no recompute all separators are one pass
  // (each sees the documents before it: rows() limits them by position); with it, the separator
  // after a document rides in that document's recompute pass.
  auto t = std::chrono::steady_clock::now();
  std::vector<uint32_t> pos;
  std::vector<int32_t> toks;
  const bool any_pick = std::any_of(pick.begin(), pick.end(), [](uint32_t n) { return n > 0; });
  for (uint32_t d = 1; d < K && (!any_pick || d == 1); ++d) separator_at(d, pos, toks);
  if (S > 0) {
    cache->rows(1, any_pick ? -1 : int(K - 1), pos);
    forward.prefill(*cache, toks, model::LogitsMode::None, nullptr, o.build_chunk);
  }
  sep_ms += ms_since(t);
  for (uint32_t d = 1; d < K && any_pick; ++d) {
    pos.clear();
    toks.clear();
    if (pick[d] > 0) {
      pick_recomputed(forward, *cache, d, *headers[d], first[d], pick[d], o.rule, pos, toks,
                      probe_ms);
      recomputed += pick[d];
    }
    t = std::chrono::steady_clock::now();
    const uint32_t recompute = static_cast<uint32_t>(toks.size());
    if (d + 1 < K) separator_at(d + 1, pos, toks);  // after document d: sees all of it
    if (toks.empty()) continue;
    cache->rows(d, static_cast<int>(d), pos);
    forward.prefill(*cache, toks, model::LogitsMode::None, nullptr, o.build_chunk);
    (recompute ? recompute_ms : sep_ms) += ms_since(t);
  }
  cache->seal();
  if (stats)
    *stats = ComposeStats{.docs = static_cast<uint32_t>(K),
                          .rows = cache->rows_seen(),
                          .separator_tokens = S,
                          .recomputed = recomputed,
                          .length = plan.length,
                          .ms = ms_since(t0),
                          .separator_ms = sep_ms,
                          .probe_ms = probe_ms,
                          .recompute_ms = recompute_ms};
  return cache;
}

}  // namespace kvzip::loader
