// Composed caches of a model with sliding-window layers (loader/compose.h, cache/composed_cache.h),
// on the tiny Gemma 3 fixture (tests/golden/hf/gemma3: 6 layers, layers 0-4 local with window 8
// and their own RoPE base, layer 5 global), documents several windows long:
//  - one document composed alone answers as its cache queried alone, over the same rows (the
//    local layers' window by position over the part equals the window by rows of a single cache);
//  - two ratio-1.0 caches composed with no recompute equal the block-diagonal reference (the first
//    document and the separator prefilled densely, the second alone at its shifted positions, the
//    rows joined into one cache in which rows are consecutive positions): the second document's
//    keys are turned to their composed positions with the local layers' RoPE base there;
//  - three ratio-1.0 caches with every later token recomputed equal the joint prefill of the
//    documents: recomputed tokens see, in the local layers, the earlier document's last rows and
//    nothing before their window;
//  - the first row each token sees in a local layer (of every document and of the composition's own
//    rows) against a plain count over composed positions, while building and after;
//  - [realmodel] Gemma 3 270M (window 512): two passages longer than the window, recomputed whole,
//    answer as their joint prefill (exact matrix products).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>

#include "cache/composed_cache.h"
#include "cache/kv_cache.h"
#include "cache/ragged_cache.h"
#include "common/error.h"
#include "compress/pipeline.h"
#include "kernels/rope.h"
#include "loader/loader.h"
#include "model/model.h"
#include "tests/format/fixtures.h"
#include "tests/support/compose_rows.h"
#include "tests/support/hf_fixture.h"
#include "tests/support/skip.h"
#include "tests/support/source_path.h"
#include "tests/support/thrown.h"

using namespace kvzip;
using kvzip::test::assemble;
using kvzip::test::greedy;
using kvzip::test::HeadRows;
using kvzip::test::ids;
using kvzip::test::max_abs_diff;

namespace {

const char* kDocs[] = {
    "The river town kept its clocks an hour behind the capital, out of spite. The ferryman painted "
    "a new number on his boat every spring, and nobody asked him why.",
    "Nobody remembered who planted the orchard, but everybody knew the pears were sour. A teacher "
    "stayed for nine winters and left a map of the hills behind.",
    "The lighthouse keeper counted ships in a green notebook and sent the pages to his sister, who "
    "kept them in a tin under the stairs."};
const char* kQuestion = "Who painted the boat, and which fruit was sour?";

struct Gemma {
  const std::unique_ptr<model::Model> m = model::Model::load(test::hf_golden("gemma3"));
  const ModelConfig& cfg = m->config();
  const uint32_t W = cfg.sliding_window;
  format::testing::TempDir dir;

  std::string compress(int doc, double ratio, const std::string& name) const {
    compress::CompressFileOptions o;
    o.compress.method = ratio < 1.0 ? "kvzip" : "full";
    o.compress.ratio = ratio;
    o.compress.scorer = compress::make_scorer_options(m->chat(), 512, 0);
    o.compress.prefill.answer_room = 64;  // the fixture's context is 512
    // fp32 attention throughout, so the composed caches compare with plain fp32 prefills.
    o.compress.prefill.attention_bf16 = false;
    o.compress.scorer.kvzip_bf16 = false;
    o.threads = 1;
    const std::string p = dir.path(name);
    compress::compress_to_file(*m, kDocs[doc], o, p);
    return p;
  }
  std::vector<float> inv_freq() const {
    return kernels::rope_inv_freq(cfg.head_dim, cfg.rope_base, cfg.rope_scaling);
  }
};

loader::SessionOptions options(double blend) {
  loader::SessionOptions o;
  o.threads = 1;
  o.compose.blend = blend;
  return o;
}

// Appends T pending tokens' rows (zeros) to every layer, as the forward pass would before
// attending.
void append_pending(model::ComposedCache& c, uint32_t T) {
  c.reserve_append(T);
  const model::CacheShape s = c.shape();
  const std::vector<float> zeros(size_t(T) * s.n_kv_heads * s.head_dim, 0.0f);
  for (uint32_t l = 0; l < s.n_layers; ++l) c.append(l, zeros.data(), zeros.data(), T);
}

// Checks, for every layer, head and pending token of `c` (append_pending done, at `pos`), the rows
// its attention would see against a count over composed positions: in a local layer a token at p
// sees the rows at (p - W, p], of the documents (the ones it sees at all: the first `visible`
// whole, later ones below p from their first token on) and of the composition's own rows (up to
// itself); in a global layer the window is absent.
void check_windows(const model::ComposedCache& c, const std::vector<model::ComposedDoc>& docs,
                   const ModelConfig& cfg, const std::vector<uint32_t>& pos, uint32_t visible) {
  const model::CacheShape s = c.shape();
  const uint32_t T = static_cast<uint32_t>(pos.size()), W = cfg.sliding_window;
  uint64_t checked = 0;
  for (uint32_t l = 0; l < s.n_layers; ++l) {
    const model::CacheParts parts = c.parts(l);
    for (uint32_t h = 0; h < s.n_kv_heads; ++h) {
      INFO("layer " << l << " head " << h);
      const model::KvHeadView own = c.view(l, h);
      REQUIRE((own.from != nullptr) == cfg.is_local(l));
      for (uint32_t t = 0; t < T; ++t)
        for (uint32_t j = 0; j < own.len; ++j) {
          const bool want =
              own.positions[j] <= pos[t] && (!cfg.is_local(l) || own.positions[j] + W > pos[t]);
          const bool got = j <= own.len - T + t && (!own.from || j >= own.from[t]);
          CHECK(got == want);
        }
      for (uint32_t p = 0; p < parts.n; ++p) {
        const kernels::KvSpan& sp = parts.spans[size_t(p) * s.n_kv_heads + h];
        REQUIRE((sp.from != nullptr) == cfg.is_local(l));
        const model::KvHeadView dv = docs[p].base->f32("test").view(l, h);
        REQUIRE(dv.len == sp.len);
        for (uint32_t t = 0; t < T; ++t)
          for (uint32_t j = 0; j < sp.len; ++j) {
            if (sp.skip && kernels::skip_bit(sp.skip, j)) continue;
            const uint64_t at = uint64_t(dv.positions[j]) + docs[p].shift;
            const bool seen_doc = p < visible || (pos[t] >= docs[p].first && at < pos[t]);
            const bool want = seen_doc && (!cfg.is_local(l) || at + W > pos[t]);
            const bool got = j < (sp.limit ? sp.limit[t] : sp.len) && (!sp.from || j >= sp.from[t]);
            CHECK(got == want);
            ++checked;
          }
      }
    }
  }
  CHECK(checked > 0);
}

}  // namespace

TEST_CASE("one Gemma 3 document composed alone answers as its cache alone",
          "[loader][compose][hybrid]") {
  Gemma g;
  REQUIRE(g.cfg.hybrid());
  const std::string a = g.compress(0, 0.5, "a.kvz");
  loader::QuerySession single(*g.m, a, options(0.0));
  REQUIRE(single.header().document_tokens.size() > 2 * g.W);
  const loader::Answer want = single.ask(kQuestion, greedy(4));

  format::CacheReader r = format::CacheReader::open(a);
  const model::KvBase base = loader::base_from_reader(r);
  loader::ComposeOptions co;
  loader::ComposePlan plan = loader::plan_composition({&r.header()}, g.m->tokenizer(), co);
  plan.docs[0].base = &base;
  model::ComposedCache view(plan.docs, g.inv_freq(), plan.length, model::composed_window(g.cfg));
  view.seal();
  CHECK(view.logical_length() == r.header().logical_length());
  // The same rows: the view reads every stored row of the cache, none left out.
  const model::CacheShape s = view.shape();
  for (uint32_t l = 0; l < s.n_layers; ++l)
    for (uint32_t h = 0; h < s.n_kv_heads; ++h) {
      const kernels::KvSpan& sp = view.parts(l).spans[h];
      CHECK(sp.k == base.f32("test").k_rows(l, h));
      CHECK(sp.len == base.f32("test").kept(l, h));
      for (uint32_t j = 0; j < sp.len; ++j) CHECK_FALSE(kernels::skip_bit(sp.skip, j));
    }
  model::Forward fw(g.m->weights(), model::ForwardOptions{1});
  const std::vector<int32_t> prompt =
      loader::question_tokens(g.m->tokenizer(), r.header(), kQuestion);
  const model::GenerateResult got = model::generate(fw, view, prompt, greedy(4));
  INFO("max |Δ logit| " << max_abs_diff(got.first_logits, want.first_logits));
  CHECK(max_abs_diff(got.first_logits, want.first_logits) < 1e-4);
  CHECK(got.tokens == want.tokens);
}

TEST_CASE("two composed Gemma 3 caches equal the block-diagonal reference",
          "[loader][compose][hybrid]") {
  Gemma g;
  const std::string a = g.compress(0, 1.0, "a.kvz"), b = g.compress(1, 1.0, "b.kvz");
  loader::QuerySession s(*g.m, std::vector<std::string>{a, b}, options(0.0));
  const format::CacheHeader& h1 = s.header();
  const format::CacheHeader& h2 = s.more_headers().at(0);
  REQUIRE(h2.document_tokens.size() > 2 * g.W);

  // Reference: doc 1 + separator in one dense cache, doc 2 alone at its shifted positions.
  model::Forward fw(g.m->weights(), model::ForwardOptions{1});
  const model::CacheShape shape = model::cache_shape(g.cfg);
  model::KvCache first(shape);
  std::vector<int32_t> seq = ids(h1.prefix_tokens);
  for (uint32_t t : h1.document_tokens) seq.push_back(static_cast<int32_t>(t));
  const std::vector<int32_t> sep = g.m->tokenizer().encode("\n\n", false);
  seq.insert(seq.end(), sep.begin(), sep.end());
  fw.prefill(first, seq, model::LogitsMode::None);
  const uint32_t start2 = first.logical_length();
  const uint32_t shift = start2 - static_cast<uint32_t>(h2.prefix_length());
  model::RaggedKvCache second(shape, shift,
                              std::vector<uint32_t>(shape.n_layers * shape.n_kv_heads, 0), 256);
  std::vector<int32_t> seq2 = ids(h2.prefix_tokens);
  for (uint32_t t : h2.document_tokens) seq2.push_back(static_cast<int32_t>(t));
  fw.prefill(second, seq2, model::LogitsMode::None);
  const uint32_t length = start2 + static_cast<uint32_t>(h2.document_tokens.size());
  CHECK(s.compose_stats().length == length);
  std::vector<HeadRows> heads(size_t(shape.n_layers) * shape.n_kv_heads);
  for (uint32_t l = 0; l < shape.n_layers; ++l)
    for (uint32_t h = 0; h < shape.n_kv_heads; ++h) {
      heads[size_t(l) * shape.n_kv_heads + h].add(first.view(l, h), 0, shape.head_dim);
      heads[size_t(l) * shape.n_kv_heads + h].add(
          second.view(l, h), static_cast<uint32_t>(h2.prefix_length()), shape.head_dim);
    }
  // Every position once, in order: a window by rows over it is the window by position.
  model::RaggedKvCache joined = assemble(heads, shape, length);
  const std::vector<int32_t> prompt = loader::question_tokens(g.m->tokenizer(), h1, kQuestion);
  const model::GenerateResult want = model::generate(fw, joined, prompt, greedy(6));
  for (int round = 0; round < 2; ++round) {
    const loader::Answer got = s.ask(kQuestion, greedy(6));
    INFO("max |Δ logit| " << max_abs_diff(got.first_logits, want.first_logits));
    CHECK(max_abs_diff(got.first_logits, want.first_logits) < 1e-4);
    CHECK(got.tokens == want.tokens);
  }
}

TEST_CASE("recomputing every later Gemma 3 token equals a joint prefill",
          "[loader][compose][hybrid]") {
  Gemma g;
  const std::vector<std::string> paths{g.compress(0, 1.0, "a.kvz"), g.compress(1, 1.0, "b.kvz"),
                                       g.compress(2, 1.0, "c.kvz")};
  loader::QuerySession s(*g.m, paths, options(1.0));
  model::Forward fw(g.m->weights(), model::ForwardOptions{1});
  model::KvCache joint(model::cache_shape(g.cfg));
  std::vector<int32_t> seq = ids(s.header().prefix_tokens);
  const std::vector<int32_t> sep = g.m->tokenizer().encode("\n\n", false);
  for (const format::CacheHeader* h : {&s.header(), &s.more_headers()[0], &s.more_headers()[1]}) {
    REQUIRE(h->document_tokens.size() > 2 * g.W);  // the local layers' window matters
    if (h != &s.header()) seq.insert(seq.end(), sep.begin(), sep.end());
    for (uint32_t t : h->document_tokens) seq.push_back(static_cast<int32_t>(t));
  }
  fw.prefill(joint, seq, model::LogitsMode::None);
  CHECK(joint.logical_length() == s.compose_stats().length);
  const std::vector<int32_t> prompt =
      loader::question_tokens(g.m->tokenizer(), s.header(), kQuestion);
  const model::GenerateResult want = model::generate(fw, joint, prompt, greedy(6));
  const loader::Answer got = s.ask(kQuestion, greedy(6));
  INFO("max |Δ logit| " << max_abs_diff(got.first_logits, want.first_logits));
  CHECK(max_abs_diff(got.first_logits, want.first_logits) < 1e-3);
  CHECK(got.tokens == want.tokens);
  // Recomputing nothing does not: the later documents never saw the earlier ones.
  loader::QuerySession none(*g.m, paths, options(0.0));
  CHECK(max_abs_diff(none.ask(kQuestion, greedy(1)).first_logits, want.first_logits) > 1e-3);
}

TEST_CASE("a Gemma 3 composition's local windows match a count over positions",
          "[loader][compose][hybrid]") {
  Gemma g;
  const std::vector<std::string> paths{g.compress(0, 0.5, "a.kvz"), g.compress(1, 0.5, "b.kvz"),
                                       g.compress(2, 0.5, "c.kvz")};
  std::vector<format::CacheReader> readers;
  std::vector<model::KvBase> bases;
  for (const std::string& p : paths) readers.push_back(format::CacheReader::open(p));
  for (const format::CacheReader& r : readers) bases.push_back(loader::base_from_reader(r));
  std::vector<const format::CacheHeader*> hs;
  std::vector<const model::KvBase*> bs;
  for (size_t i = 0; i < paths.size(); ++i) hs.push_back(&readers[i].header());
  for (const model::KvBase& b : bases) bs.push_back(&b);
  model::Forward fw(g.m->weights(), model::ForwardOptions{1});

  SECTION("while building: a pass over the first later document, limited to the second") {
    loader::ComposeOptions o;
    loader::ComposePlan plan = loader::plan_composition(hs, g.m->tokenizer(), o);
    for (size_t d = 0; d < bs.size(); ++d) plan.docs[d].base = bs[d];
    model::ComposedCache c(plan.docs, g.inv_freq(), plan.length, model::composed_window(g.cfg));
    // Every third token of document 2 recomputed, its stored rows left out.
    const format::CacheHeader& h2 = *hs[1];
    const uint32_t n2 = static_cast<uint32_t>(h2.document_tokens.size()),
                   first2 = plan.docs[1].first, first3 = plan.docs[2].first;
    std::vector<uint32_t> stored, staged;
    for (uint32_t i = 0; i < first2; ++i)
      if (i + plan.separator.size() >= first2) staged.push_back(i);  // the separator before it
    for (uint32_t j = 0; j < n2; j += 3) {
      stored.push_back(static_cast<uint32_t>(h2.prefix_length()) + j);
      staged.push_back(first2 + j);
    }
    for (uint32_t i = first3 - static_cast<uint32_t>(plan.separator.size()); i < first3 + 4; ++i)
      staged.push_back(i);  // the separator before document 3, and 4 of its positions
    c.skip(1, stored);
    c.rows(1, 2, staged);
    // The first half through the forward pass (the composition's own rows), then the rest pending.
    const uint32_t half = static_cast<uint32_t>(staged.size()) / 2;
    std::vector<int32_t> tokens(half, static_cast<int32_t>(h2.document_tokens[0]));
    fw.prefill(c, tokens, model::LogitsMode::None);
    const uint32_t T = static_cast<uint32_t>(staged.size()) - half;
    append_pending(c, T);
    check_windows(c, plan.docs, g.cfg, {staged.begin() + half, staged.end()}, 1);
  }
  SECTION("sealed: a question over a composition with recomputed rows") {
    loader::ComposeOptions o;
    o.blend = 0.5;
    const auto c = loader::compose(fw, g.m->tokenizer(), hs, bs, o);
    loader::ComposePlan plan = loader::plan_composition(hs, g.m->tokenizer(), o);
    for (size_t d = 0; d < bs.size(); ++d) plan.docs[d].base = bs[d];
    std::vector<uint32_t> pos(5);
    std::iota(pos.begin(), pos.end(), c->logical_length());
    append_pending(*c, 5);
    check_windows(*c, plan.docs, g.cfg, pos, c->n_docs());
  }
}

// The real model's window (512) and RoPE bases: two Normans passages longer than the window,
// compressed whole, composed with every token of the second recomputed, answer as their joint
// prefill does; with nothing recomputed they do not. Exact matrix products throughout: the Fast
// path's int8 activations differ with how tokens fall into chunks (0.77 here), which a joint
// prefill and a recompute cut differently.
TEST_CASE("Gemma 3 270M: a composition recomputed whole equals the joint prefill",
          "[realmodel][gemma3][compose]") {
  KVZIP_GEMMA_MODEL_PATH_OR_SKIP(path);
  const std::unique_ptr<model::Model> m = model::Model::load(path);
  std::ifstream in(test::source_path("examples/normans.json"));
  REQUIRE(in);
  const nlohmann::json j = nlohmann::json::parse(in);
  std::string text;
  for (const auto& p : j["data"][0]["paragraphs"]) text += p["context"].get<std::string>() + " ";
  REQUIRE(text.size() > 5200);
  format::testing::TempDir dir;
  std::vector<std::string> paths;
  for (int i = 0; i < 2; ++i) {
    compress::CompressFileOptions o;
    o.compress.method = "full";
    o.compress.ratio = 1.0;
    o.compress.prefill.attention_bf16 = false;
    o.matmul = kernels::MatmulPath::Exact;
    o.threads = 1;
    paths.push_back(dir.path(i ? "b.kvz" : "a.kvz"));
    compress::compress_to_file(*m, text.substr(size_t(i) * 2600, 2600), o, paths.back());
  }
  loader::SessionOptions so = options(1.0);
  so.matmul = kernels::MatmulPath::Exact;
  loader::QuerySession s(*m, paths, so);
  const uint32_t W = m->config().sliding_window;
  model::ForwardOptions fo{1};
  fo.matmul = kernels::MatmulPath::Exact;
  model::Forward fw(m->weights(), fo);
  model::KvCache joint(model::cache_shape(m->config()));
  std::vector<int32_t> seq = ids(s.header().prefix_tokens);
  const std::vector<int32_t> sep = m->tokenizer().encode("\n\n", false);
  for (const format::CacheHeader* h : {&s.header(), &s.more_headers()[0]}) {
    REQUIRE(h->document_tokens.size() > W);
    if (h != &s.header()) seq.insert(seq.end(), sep.begin(), sep.end());
    for (uint32_t t : h->document_tokens) seq.push_back(static_cast<int32_t>(t));
  }
  fw.prefill(joint, seq, model::LogitsMode::None);
  const char* question = "Who was the duke of the Normans?";
  const std::vector<int32_t> prompt = loader::question_tokens(m->tokenizer(), s.header(), question);
  const model::GenerateResult want = model::generate(fw, joint, prompt, greedy(8));
  const loader::Answer got = s.ask(question, greedy(8));
  const double recomputed = max_abs_diff(got.first_logits, want.first_logits);
  so.compose.blend = 0.0;
  loader::QuerySession none(*m, paths, so);
  const double stale = max_abs_diff(none.ask(question, greedy(1)).first_logits, want.first_logits);
  INFO("max |Δ logit| recomputed " << recomputed << ", nothing recomputed " << stale);
  CHECK(recomputed < 1e-3);
  CHECK(stale > 0.1);
  CHECK(got.tokens == want.tokens);
}

TEST_CASE("caches with other sliding-window layers do not compose", "[loader][compose][hybrid]") {
  Gemma g;
  const std::string a = g.compress(0, 0.5, "a.kvz");
  format::CacheReader r = format::CacheReader::open(a);
  const format::CacheHeader& h = r.header();
  CHECK_NOTHROW(loader::check_composable({&h, &h}, {"a", "a"}, false));
  for (int field = 0; field < 3; ++field) {
    format::CacheHeader other = h;
    if (field == 0) other.sliding_window *= 2;
    if (field == 1) other.rope_local_base *= 10;
    if (field == 2) other.local_layers.back() = !other.local_layers.back();
    INFO("field " << field);
    // Even past the fingerprint check (force): the windows would not line up.
    const Error e = test::error_from([&] {
      loader::check_composable({&h, &other}, {"a", "b"}, true);
    });
    CHECK(e.code() == Errc::model_mismatch);
    CHECK(std::string(e.what()).find("cache 2 (b) has other sliding-window layers") !=
          std::string::npos);
  }
}
