// Composed sessions (loader/compose.h, cache/composed_cache.h) on a tiny random-weight GGUF model:
//  - two ratio-1.0 caches composed equal, to fp32 rounding, a reference built with the ordinary
//    caches: the first document prefilled as usual with the separator after it, the second
//    prefilled alone at its shifted positions (block-diagonal attention), their rows put together
//    into one ragged cache and the question prefilled over it;
//  - q8/q4 caches composed as stored equal the same caches composed after dequantization;
//  - recomputing every token of the later document (blend 1) equals a joint prefill of the whole
//    sequence: the recompute path sees exactly what a joint prefill sees;
//  - blend rules: sink runs no probe, the three rules recompute the same number of tokens and
//    answer differently at blend 0.5, and alike at blend 1 (every token);
//  - each question leaves the composition as it was; the documents' rows are never copied (the
//    view owns a few rows and bitmaps); errors: another model, too many caches, past the context.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

#include "cache/kv_cache.h"
#include "cache/ragged_cache.h"
#include "common/error.h"
#include "compress/pipeline.h"
#include "kernels/rope.h"
#include "loader/loader.h"
#include "tests/support/compose_rows.h"
#include "tests/support/random_weights.h"
#include "tests/support/thrown.h"
#include "tests/support/tiny_gguf.h"
#include "tests/support/tiny_model_dir.h"

using namespace kvzip;
using kvzip::test::assemble;
using kvzip::test::greedy;
using kvzip::test::HeadRows;
using kvzip::test::ids;
using kvzip::test::max_abs_diff;

namespace {

test::TinyModelSpec spec(uint64_t seed) {
  test::TinyModelSpec s;
  s.config = test::tiny_gguf_llama_config();
  s.config.d_model = 128;
  s.config.n_heads = 4;
  s.config.n_kv_heads = 2;
  s.config.head_dim = 32;
  s.config.d_ffn = 128;
  s.config.max_context = 1024;
  s.seed = seed;
  return s;
}

const char* kDocs[] = {
    "The river town kept its clocks an hour behind the capital, out of spite. The ferryman painted "
    "a "
    "new number on his boat every spring.",
    "Nobody remembered who planted the orchard, but everybody knew the pears were sour. A teacher "
    "stayed for nine winters.",
    "The lighthouse keeper counted ships in a green notebook and sent the pages to his sister."};

struct Fixture : test::TinyModelDir {
  explicit Fixture(uint64_t seed = 23, const char* tag = "compose")
      : TinyModelDir(tag, spec(seed), 2) {}

  std::string compress(int doc, format::DType dtype, double ratio, const std::string& name) const {
    compress::CompressFileOptions o;
    o.compress.method = ratio < 1.0 ? "kvzip" : "full";
    o.compress.ratio = ratio;
    o.compress.scorer = compress::make_scorer_options(model->chat(), 512, 0);
    // fp32 attention throughout, so the composed caches compare with plain fp32 prefills.
    o.compress.prefill.attention_bf16 = false;
    o.compress.scorer.kvzip_bf16 = false;
    o.system = "Be brief.";
    o.kv.dtype = dtype;
    o.threads = 2;
    const std::string p = path(name);
    compress::compress_to_file(*model, kDocs[doc], o, p);
    return p;
  }
};

loader::SessionOptions options(double blend = 0.0, loader::KvForm form = loader::KvForm::Auto) {
  loader::SessionOptions o;
  o.threads = 2;
  o.kv_form = form;
  o.compose.blend = blend;
  return o;
}

const char* kQuestion = "Who painted the boat, and which fruit was sour?";

}  // namespace

TEST_CASE("two composed ratio-1.0 caches equal the block-diagonal reference", "[loader][compose]") {
  Fixture f;
  const std::string a = f.compress(0, format::DType::F32, 1.0, "a.kvz");
  const std::string b = f.compress(1, format::DType::F32, 1.0, "b.kvz");
  loader::QuerySession s(*f.model, std::vector<std::string>{a, b}, options());
  REQUIRE(s.composed());
  const format::CacheHeader& h1 = s.header();
  const format::CacheHeader& h2 = s.more_headers().at(0);
  const loader::ComposeStats& st = s.compose_stats();
  CHECK(st.docs == 2);
  CHECK(st.recomputed == 0);

  // Reference: doc 1 + separator in one dense cache, doc 2 alone at its shifted positions.
  model::Forward fw(f.model->weights(), model::ForwardOptions{2});
  const model::CacheShape shape = model::cache_shape(f.model->config());
  model::KvCache first(shape);
  std::vector<int32_t> seq = ids(h1.prefix_tokens);
  for (uint32_t t : h1.document_tokens) seq.push_back(static_cast<int32_t>(t));
  const std::vector<int32_t> sep = f.model->tokenizer().encode("\n\n", false);
  seq.insert(seq.end(), sep.begin(), sep.end());
  fw.prefill(first, seq, model::LogitsMode::None);
  const uint32_t start2 = first.logical_length();  // doc 2's first document token
  const uint32_t shift = start2 - static_cast<uint32_t>(h2.prefix_length());
  model::RaggedKvCache second(shape, shift,
                              std::vector<uint32_t>(shape.n_layers * shape.n_kv_heads, 0), 64);
  std::vector<int32_t> seq2 = ids(h2.prefix_tokens);
  for (uint32_t t : h2.document_tokens) seq2.push_back(static_cast<int32_t>(t));
  fw.prefill(second, seq2, model::LogitsMode::None);
  const uint32_t length = start2 + static_cast<uint32_t>(h2.document_tokens.size());
  CHECK(st.length == length);
  std::vector<HeadRows> heads(size_t(shape.n_layers) * shape.n_kv_heads);
  for (uint32_t l = 0; l < shape.n_layers; ++l)
    for (uint32_t h = 0; h < shape.n_kv_heads; ++h) {
      heads[size_t(l) * shape.n_kv_heads + h].add(first.view(l, h), 0, shape.head_dim);
      heads[size_t(l) * shape.n_kv_heads + h].add(
          second.view(l, h), static_cast<uint32_t>(h2.prefix_length()), shape.head_dim);
    }
  model::RaggedKvCache joined = assemble(heads, shape, length);
  const std::vector<int32_t> prompt = loader::question_tokens(f.model->tokenizer(), h1, kQuestion);
  const model::GenerateResult want = model::generate(fw, joined, prompt, greedy(8));

  for (int round = 0; round < 2; ++round) {  // the composition is intact after every answer
    const loader::Answer got = s.ask(kQuestion, greedy(8));
    const double scale = *std::max_element(want.first_logits.begin(), want.first_logits.end());
    INFO("max |Δ logit| " << max_abs_diff(got.first_logits, want.first_logits) << " of " << scale);
    CHECK(max_abs_diff(got.first_logits, want.first_logits) <
          1e-4 * std::max(1.0, std::fabs(scale)));
    CHECK(got.tokens == want.tokens);
  }
  // The view reads the loaded caches in place: it owns the separator and question rows only.
  CHECK(s.composed_cache()->bytes_owned() < s.base().bytes_kept() / 4);
  // And the caches need no append room (a single cache's session keeps the options' room).
  CHECK(s.base().f32("test").layout().room() == 0);
  loader::QuerySession single(*f.model, a, options());
  CHECK(single.base().f32("test").layout().room() == options().room);
}

TEST_CASE("composed q8/q4 caches as stored equal them dequantized",
          "[loader][compose][kvquant-attn]") {
  Fixture f;
  for (format::DType dt : {format::DType::Q8, format::DType::Q4}) {
    const std::string tag = format::dtype_name(dt);
    const std::string a = f.compress(0, dt, 0.6, tag + "a.kvz"),
                      b = f.compress(1, dt, 0.6, tag + "b.kvz"),
                      c = f.compress(2, format::DType::F32, 0.6,
                                     tag + "c.kvz");  // mixed types compose
    const std::vector<std::string> paths{a, b, c};
    loader::QuerySession quant(*f.model, paths, options());
    loader::QuerySession plain(*f.model, paths, options(0.0, loader::KvForm::F32));
    REQUIRE(quant.quantized());
    const loader::Answer x = quant.ask(kQuestion, greedy(8)), y = plain.ask(kQuestion, greedy(8));
    INFO(tag);
    CHECK(max_abs_diff(x.first_logits, y.first_logits) < 1e-3);
    CHECK(x.tokens == y.tokens);
  }
}

TEST_CASE("recomputing every later token equals a joint prefill", "[loader][compose]") {
  Fixture f;
  const std::string a = f.compress(0, format::DType::F32, 1.0, "a.kvz");
  const std::string b = f.compress(1, format::DType::F32, 1.0, "b.kvz");
  const std::string c = f.compress(2, format::DType::F32, 1.0, "c.kvz");
  loader::QuerySession s(*f.model, std::vector<std::string>{a, b, c}, options(1.0));
  CHECK(s.compose_stats().recomputed ==
        s.more_headers()[0].document_tokens.size() + s.more_headers()[1].document_tokens.size());
  // The joint prefill of the same token sequence.
  model::Forward fw(f.model->weights(), model::ForwardOptions{2});
  model::KvCache joint(model::cache_shape(f.model->config()));
  std::vector<int32_t> seq = ids(s.header().prefix_tokens);
  const std::vector<int32_t> sep = f.model->tokenizer().encode("\n\n", false);
  for (const format::CacheHeader* h : {&s.header(), &s.more_headers()[0], &s.more_headers()[1]}) {
    if (h != &s.header()) seq.insert(seq.end(), sep.begin(), sep.end());
    for (uint32_t t : h->document_tokens) seq.push_back(static_cast<int32_t>(t));
  }
  fw.prefill(joint, seq, model::LogitsMode::None);
  CHECK(joint.logical_length() == s.compose_stats().length);
  const std::vector<int32_t> prompt =
      loader::question_tokens(f.model->tokenizer(), s.header(), kQuestion);
  const model::GenerateResult want = model::generate(fw, joint, prompt, greedy(8));
  const loader::Answer got = s.ask(kQuestion, greedy(8));
  CHECK(max_abs_diff(got.first_logits, want.first_logits) < 1e-3);
  CHECK(got.tokens == want.tokens);
  // And recomputing nothing does not: the later documents never saw the earlier ones.
  loader::QuerySession none(*f.model, std::vector<std::string>{a, b, c}, options(0.0));
  CHECK(max_abs_diff(none.ask(kQuestion, greedy(1)).first_logits, want.first_logits) > 1e-3);
}

TEST_CASE("all separators in one pass equal one pass per separator", "[loader][compose]") {
  Fixture f;
  const std::vector<std::string> paths{f.compress(0, format::DType::F32, 0.6, "a.kvz"),
                                       f.compress(1, format::DType::Q8, 0.6, "b.kvz"),
                                       f.compress(2, format::DType::F32, 0.6, "c.kvz")};
  std::vector<format::CacheReader> readers;
  std::vector<model::KvBase> bases;
  for (const std::string& p : paths) {
    readers.push_back(format::CacheReader::open(p));
    bases.push_back(loader::base_from_reader(readers.back()));
  }
  std::vector<const format::CacheHeader*> hs;
  std::vector<const model::KvBase*> bs;
  for (size_t i = 0; i < paths.size(); ++i)
    hs.push_back(&readers[i].header()), bs.push_back(&bases[i]);
  model::Forward fw(f.model->weights(), model::ForwardOptions{2, 48, {}});
  const std::vector<int32_t> prompt =
      loader::question_tokens(f.model->tokenizer(), *hs[0], kQuestion);
  for (bool doc_prefix :
       {false, true}) {  // kept prefixes sit before each document: never seen early
    INFO("doc_prefix " << doc_prefix);
    loader::ComposeOptions o;
    o.blend = 0.0;
    o.doc_prefix = doc_prefix;
    // The reference: each separator its own forward pass, seeing only the documents before it.
    loader::ComposePlan plan = loader::plan_composition(hs, f.model->tokenizer(), o);
    for (size_t d = 0; d < bs.size(); ++d) plan.docs[d].base = bs[d];
    const ModelConfig& cfg = f.model->config();
    model::ComposedCache ref(plan.docs,
                             kernels::rope_inv_freq(cfg.head_dim, cfg.rope_base, cfg.rope_scaling),
                             plan.length);
    const uint32_t S = static_cast<uint32_t>(plan.separator.size());
    REQUIRE(S > 0);
    for (uint32_t d = 1; d < bs.size(); ++d) {
      std::vector<uint32_t> pos(S);
      std::iota(pos.begin(), pos.end(), plan.docs[d].first - S);
      ref.rows(d, -1, pos);
      fw.prefill(ref, plan.separator, model::LogitsMode::None);
    }
    ref.seal();
    const std::vector<float> want = fw.prefill(ref, prompt, model::LogitsMode::Last);
    loader::ComposeStats st;
    auto got_cache = loader::compose(fw, f.model->tokenizer(), hs, bs, o, &st);
    CHECK(got_cache->own_rows() == 2 * S);
    const std::vector<float> got = fw.prefill(*got_cache, prompt, model::LogitsMode::Last);
    CHECK(max_abs_diff(got, want) < 1e-4);
    if (doc_prefix) continue;
    // A separator that saw a later document would move the answer: seeing all of them does. (With
    // the documents' own prefixes kept, this tiny model's separators attend to those identical
    // sink rows only, so which documents they see changes nothing there.)
    model::ComposedCache wrong(
        plan.docs, kernels::rope_inv_freq(cfg.head_dim, cfg.rope_base, cfg.rope_scaling),
        plan.length);
    for (uint32_t d = 1; d < bs.size(); ++d) {
      std::vector<uint32_t> pos(S);
      std::iota(pos.begin(), pos.end(), plan.docs[d].first - S);
      wrong.rows(uint32_t(bs.size()), -1, pos);
      fw.prefill(wrong, plan.separator, model::LogitsMode::None);
    }
    wrong.seal();
    CHECK(max_abs_diff(fw.prefill(wrong, prompt, model::LogitsMode::Last), want) > 1e-3);
  }
}

TEST_CASE("compositions refuse another model, too many caches and a context overflow",
          "[loader][compose]") {
  Fixture f;
  Fixture other(99, "compose_other");
  const std::string a = f.compress(0, format::DType::F32, 0.5, "a.kvz");
  const std::string b = f.compress(1, format::DType::F32, 0.5, "b.kvz");
  const std::string x = other.compress(1, format::DType::F32, 0.5, "x.kvz");
  // The other model's cache is refused by the session's model check before any composing.
  CHECK(test::throws_code(
      [&] {
        loader::QuerySession(*f.model, std::vector<std::string>{a, x}, options());
      },
      Errc::model_mismatch));
  loader::SessionOptions few = options();
  few.compose.max_docs = 2;
  CHECK(test::throws_code(
      [&] {
        loader::QuerySession(*f.model, std::vector<std::string>{a, b, a}, few);
      },
      Errc::invalid_argument));
  // The same document many times over fills the 1,024-position context.
  std::vector<std::string> many(16, a);
  CHECK(test::throws_code([&] { loader::QuerySession(*f.model, many, options()); },
                          Errc::invalid_argument));
  // A composition checks fingerprints itself too (headers from two models).
  std::vector<const format::CacheHeader*> hs;
  format::CacheReader ra = format::CacheReader::open(a), rx = format::CacheReader::open(x);
  hs = {&ra.header(), &rx.header()};
  const Error e = test::error_from([&] { loader::check_composable(hs, {"a", "x"}, false); });
  CHECK(e.code() == Errc::model_mismatch);
  CHECK(std::string(e.what()).find("cache 2 (x)") != std::string::npos);
  CHECK_NOTHROW(loader::check_composable(hs, {"a", "x"}, true));
}

TEST_CASE("compositions read the loaded caches in place, however many answer at once",
          "[loader][compose]") {
  Fixture f;
  const std::string a = f.compress(0, format::DType::F32, 0.5, "a.kvz");
  const std::string b = f.compress(1, format::DType::Q4, 0.5, "b.kvz");
  format::CacheReader ra = format::CacheReader::open(a), rb = format::CacheReader::open(b);
  const model::KvBase ba = loader::base_from_reader(ra), bb = loader::base_from_reader(rb);
  const std::vector<const format::CacheHeader*> hs{&ra.header(), &rb.header()};
  const std::vector<const model::KvBase*> bases{&ba, &bb};
  model::Forward fw(f.model->weights(), model::ForwardOptions{2});
  const std::vector<int32_t> prompt =
      loader::question_tokens(f.model->tokenizer(), ra.header(), kQuestion);
  // Eight compositions over the same two caches, each with a question in it (as eight served
  // requests would hold them at once): every block they attend to is the loaded cache's own memory.
  std::vector<std::unique_ptr<model::ComposedCache>> views;
  for (int i = 0; i < 8; ++i) {
    loader::ComposeOptions none;
    none.blend = 0.0;  // no recomputed rows: the view owns the separator and the question only
    views.push_back(loader::compose(fw, f.model->tokenizer(), hs, bases, none));
    fw.prefill(*views.back(), prompt, model::LogitsMode::Last);
    const model::CacheShape s = views.back()->shape();
    for (uint32_t l = 0; l < s.n_layers; ++l) {
      const model::CacheParts parts = views.back()->parts(l);
      REQUIRE(parts.n == 2);
      for (uint32_t h = 0; h < s.n_kv_heads; ++h) {
        CHECK(parts.spans[h].k == ba.f32("test").k_rows(l, h));
        CHECK(parts.spans[s.n_kv_heads + h].quant == bb.quant().quant(l, h));
        CHECK(parts.spans[s.n_kv_heads + h].k == bb.quant().dense_k(l, h));
      }
    }
    CHECK(views.back()->bytes_owned() == views[0]->bytes_owned());
  }
  // What a view owns does not grow with the documents: over the same documents kept whole (twice
  // the rows) a view owns the same bytes but for its skip bitmaps, where a copy would double.
  const std::string a1 = f.compress(0, format::DType::F32, 1.0, "a1.kvz");
  const std::string b1 = f.compress(1, format::DType::F32, 1.0, "b1.kvz");
  format::CacheReader ra1 = format::CacheReader::open(a1), rb1 = format::CacheReader::open(b1);
  const model::KvBase ba1 = loader::base_from_reader(ra1), bb1 = loader::base_from_reader(rb1);
  loader::ComposeOptions none;
  none.blend = 0.0;
  auto whole =
      loader::compose(fw, f.model->tokenizer(), {&ra1.header(), &rb1.header()}, {&ba1, &bb1}, none);
  fw.prefill(*whole, prompt, model::LogitsMode::Last);
  INFO("a view owns " << views[0]->bytes_owned() << " bytes over ratio-0.5 caches, "
                      << whole->bytes_owned() << " over ratio-1.0 caches of "
                      << ba1.bytes_kept() + bb1.bytes_kept() << " bytes");
  CHECK(std::abs(double(whole->bytes_owned()) - double(views[0]->bytes_owned())) < 1024);
  CHECK(ba1.bytes_kept() + bb1.bytes_kept() > ba.bytes_kept() + bb.bytes_kept() + 8192);
}

TEST_CASE("blend rules: sink probes nothing; the rules differ below 1 and agree at 1",
          "[loader][compose]") {
  Fixture f;
  const std::vector<std::string> caches = {f.compress(0, format::DType::F32, 1.0, "a.kvz"),
                                           f.compress(1, format::DType::F32, 1.0, "b.kvz"),
                                           f.compress(2, format::DType::F32, 1.0, "c.kvz")};
  auto session = [&](loader::BlendRule rule, double blend) {
    loader::SessionOptions o = options(blend);
    o.compose.rule = rule;
    return std::make_unique<loader::QuerySession>(*f.model, caches, o);
  };
  std::vector<std::vector<float>> half, all;
  for (loader::BlendRule rule :
       {loader::BlendRule::deviation, loader::BlendRule::sink, loader::BlendRule::sink_deviation}) {
    INFO(loader::blend_rule_name(rule));
    const auto s = session(rule, 0.5);
    uint64_t want = 0;
    for (const format::CacheHeader& h : s->more_headers())
      want += static_cast<uint64_t>(std::llround(0.5 * double(h.document_tokens.size())));
    CHECK(s->compose_stats().recomputed == want);
    CHECK((s->compose_stats().probe_ms == 0.0) == (rule == loader::BlendRule::sink));
    half.push_back(s->ask(kQuestion, greedy(1)).first_logits);
    all.push_back(session(rule, 1.0)->ask(kQuestion, greedy(1)).first_logits);
  }
  CHECK(max_abs_diff(half[0], half[1]) > 1e-4);
  CHECK(max_abs_diff(half[0], half[2]) > 1e-4);
  CHECK(max_abs_diff(half[1], half[2]) > 1e-4);
  CHECK(max_abs_diff(all[0], all[1]) < 1e-5);
  CHECK(max_abs_diff(all[0], all[2]) < 1e-5);
}

TEST_CASE("an unset blend is the model's default, by architecture", "[loader][compose]") {
  CHECK(loader::default_blend("qwen2") == 0.3);
  CHECK(loader::default_blend("llama") == 0.5);
  CHECK(loader::default_blend("gemma3") == 0.3);
  CHECK(loader::default_blend("mistral") == 0.3);
  Fixture f;
  const std::vector<std::string> caches = {f.compress(0, format::DType::F32, 1.0, "a.kvz"),
                                           f.compress(1, format::DType::F32, 1.0, "b.kvz")};
  loader::SessionOptions o = options();
  o.compose.blend.reset();
  loader::QuerySession s(*f.model, caches, o);
  const double blend = loader::default_blend(f.model->config().arch);
  const uint64_t want = static_cast<uint64_t>(
      std::llround(blend * double(s.more_headers()[0].document_tokens.size())));
  CHECK(want > 0);
  CHECK(s.compose_stats().recomputed == want);
}
