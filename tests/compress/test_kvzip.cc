// KVzip scoring against a naive reference written plainly here (materialise the local logits over
// prefix ⊕ chunk ⊕ R_t's own keys, softmax, max over the GQA group and all R_t positions), with
// the document split into several chunks and R_t longer than the forward's chunk; query-aware
// KVzip (known questions max-combined into the same statistics) against that reference; and the
// reconstruction inputs built from a real chat template.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.h"
#include "compress/scorer.h"
#include "compress/selection.h"
#include "model/prefill.h"
#include "tests/compress/support.h"
#include "tests/support/random_weights.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/detail/bpe.h"
#include "tokenizer/tokenizer.h"

using namespace kvzip;

namespace {

compress::ReconstructionPrompts synthetic_prompts() {
  compress::ReconstructionPrompts p;
  p.first = {3, 4, 5};
  p.next = {6, 7, 8, 9};
  p.turn_end = {10, 11};
  return p;
}

// score[l][h][j] for the document rows of chunk [b, e), computed the plain way: R_t is run through
// a second (tracing) forward on a copy of the cache, and every local attention row is materialised.
void reference_chunk(const model::Weights& w, model::KvCache& cache, uint32_t n_p, uint32_t n_c,
                     const std::vector<int32_t>& r, uint32_t b, uint32_t e,
                     std::vector<double>& out /* (L, Hkv, n_c) */) {
  const ModelConfig& c = w.config;
  const uint32_t D = c.head_dim, Hq = c.n_heads, Hkv = c.n_kv_heads, G = Hq / Hkv;
  const uint32_t r0 = n_p + n_c;
  test::QueryRecorder rec;
  rec.Hq = Hq;
  rec.D = D;
  rec.clear(r0);
  model::Forward tracing(w, model::ForwardOptions{1, 16, rec.trace_fn()});
  tracing.prefill(cache, r, model::LogitsMode::None);
  for (uint32_t l = 0; l < c.n_layers; ++l)
    for (uint32_t h = 0; h < Hkv; ++h) {
      const model::KvHeadView v = cache.view(l, h);
      std::vector<uint32_t> keys;  // K̄ rows for the last R_t query; query i sees a prefix of it
      for (uint32_t j = 0; j < n_p; ++j) keys.push_back(j);
      for (uint32_t j = n_p + b; j < n_p + e; ++j) keys.push_back(j);
      const size_t fixed = keys.size();
      for (uint32_t j = r0; j < r0 + r.size(); ++j) keys.push_back(j);
      for (uint32_t g = 0; g < G; ++g)
        for (uint32_t i = 0; i < r.size(); ++i) {
          const float* q = rec.at(l, r0 + i, h * G + g);
          const size_t n = fixed + i + 1;  // causal inside R_t
          std::vector<double> logit(n);
          double mx = -INFINITY, sum = 0;
          for (size_t k = 0; k < n; ++k) {
            double s = 0;
            for (uint32_t d = 0; d < D; ++d) s += double(q[d]) * v.k[size_t(keys[k]) * D + d];
            logit[k] = s / std::sqrt(double(D));
            mx = std::max(mx, logit[k]);
          }
          for (double& x : logit) sum += (x = std::exp(x - mx));
          for (uint32_t j = b; j < e; ++j) {
            double& o = out[(size_t(l) * Hkv + h) * n_c + j];
            o = std::max(o, logit[n_p + (j - b)] / sum);
          }
        }
    }
  cache.rollback(r0);
}

struct Setup {
  ModelConfig cfg;
  model::Weights w;
  std::vector<int32_t> prefix, doc;
};

Setup setup(const ModelConfig& cfg, uint32_t n_p, uint32_t n_c) {
  return Setup{cfg, test::random_weights(cfg, 21), test::random_tokens(n_p, cfg.vocab_size, 1),
               test::random_tokens(n_c, cfg.vocab_size, 2)};
}

}  // namespace

TEST_CASE("KVzip scores equal the naive local-softmax reference over several chunks",
          "[compress]") {
  const bool qwen = GENERATE(true, false);
  Setup s = setup(qwen ? test::tiny_qwen2_config() : test::tiny_llama_config(), 7, 50);
  INFO("model " << s.cfg.arch << " G=" << s.cfg.group());
  compress::ScorerOptions so;
  so.prompts = synthetic_prompts();
  so.kvzip_chunk = 20;  // chunks [0,20) [20,40) [40,50)
  so.kvzip_hint = 8;
  so.kvzip_bf16 = false;  // fp32 passes against the float64 reference
  model::Forward fwd(
      s.w, model::ForwardOptions{2, 16, {}});  // R_t (up to 34 tokens) spans 3 forward chunks
  prefill::PrefillOptions po;
  po.attention_bf16 = false;
  prefill::PrefillResult pre = prefill::prefill_document(fwd, s.prefix, s.doc, po);
  model::KvCache before = pre.cache;

  auto scorer = compress::make_scorer("kvzip", so);
  compress::DocumentScores got = scorer->score(compress::ScoreInput{&fwd, &pre.cache, 7, s.doc});
  REQUIRE(got.values.size() == size_t(s.cfg.n_layers) * s.cfg.n_kv_heads * 50);
  // The scorer leaves the cache as it found it.
  CHECK(pre.cache.logical_length() == 57);
  for (uint32_t l = 0; l < s.cfg.n_layers; ++l) CHECK(pre.cache.view(l, 1).len == 57);

  std::vector<double> want(got.values.size(), 0.0);
  for (uint32_t b = 0; b < 50; b += 20) {
    const uint32_t e = std::min(50u, b + 20);
    std::vector<int32_t> r = compress::reconstruction_input(so.prompts, s.doc, b, e, 8);
    REQUIRE(r.size() > 16);  // longer than the forward chunk
    reference_chunk(s.w, before, 7, 50, r, b, e, want);
  }
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, std::abs(got.values[i] - want[i]));
  CHECK(worst < 2e-6);
  // Scores are probabilities and some row is attended strongly.
  CHECK(*std::min_element(got.values.begin(), got.values.end()) > 0.0f);
  CHECK(*std::max_element(got.values.begin(), got.values.end()) <= 1.0f);
}

TEST_CASE("KVzip scores do not depend on the thread count or the forward chunk", "[compress]") {
  Setup s = setup(test::tiny_qwen2_config(), 5, 30);
  compress::ScorerOptions so;
  so.prompts = synthetic_prompts();
  so.kvzip_chunk = 12;
  model::Forward f1(s.w, model::ForwardOptions{1, 512, {}});
  model::Forward f2(s.w, model::ForwardOptions{2, 7, {}});
  prefill::PrefillResult p1 = prefill::prefill_document(f1, s.prefix, s.doc);
  prefill::PrefillResult p2 = prefill::prefill_document(f1, s.prefix, s.doc);
  compress::DocumentScores a =
      compress::make_scorer("kvzip", so)->score(compress::ScoreInput{&f1, &p1.cache, 5, s.doc});
  compress::DocumentScores b =
      compress::make_scorer("kvzip", so)->score(compress::ScoreInput{&f2, &p2.cache, 5, s.doc});
  CHECK(test::rel_error(a.values, b.values) < 1e-5);
}

TEST_CASE("reconstruction inputs put the hint at the end of the user turn, before S",
          "[compress]") {
  const std::vector<int32_t> doc = {100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111};
  compress::ReconstructionPrompts p = synthetic_prompts();
  CHECK(compress::reconstruction_input(p, doc, 0, 5, 3) ==
        std::vector<int32_t>{3, 4, 5, 10, 11, 100, 101, 102, 103, 104});
  CHECK(compress::reconstruction_input(p, doc, 5, 10, 3) ==
        std::vector<int32_t>{6, 7, 8, 9, 102, 103, 104, 10, 11, 105, 106, 107, 108, 109});
  // A hint longer than what precedes the chunk quotes what there is.
  CHECK(compress::reconstruction_input(p, doc, 2, 3, 8) ==
        std::vector<int32_t>{6, 7, 8, 9, 100, 101, 10, 11, 102});
  CHECK_THROWS_AS(compress::reconstruction_input(p, doc, 10, 13, 3), Error);
  CHECK_THROWS_AS(compress::reconstruction_input(p, doc, 4, 4, 3), Error);
}

TEST_CASE("reconstruction prompts from a ChatML template are the authors' token pieces",
          "[compress]") {
  model::TokenizerData d;
  d.model = "gpt2";
  d.pre = "smollm";
  for (const char* c : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    d.tokens.push_back(c);
    d.token_types.push_back(3);
  }
  for (int b = 0; b < 256; ++b) {
    d.tokens.push_back(model::detail::byte_to_unicode(static_cast<uint8_t>(b)));
    d.token_types.push_back(1);
  }
  d.eos = 0;
  d.chat_template =
      "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>'}}";
  model::Tokenizer tok(d);
  model::ChatTemplate chat(tok);
  compress::ReconstructionPrompts p = compress::reconstruction_prompts(chat);
  CHECK(tok.decode(p.first) == compress::kRepeatFirstPrompt);
  CHECK(tok.decode(p.next) == compress::kRepeatNextPrompt);
  CHECK(tok.decode(p.turn_end) == "<|im_end|>\n<|im_start|>assistant\n");
  // [prompt ; end of user turn ; S] is exactly the template's suffix for the prompt.
  std::vector<int32_t> joined = p.first;
  joined.insert(joined.end(), p.turn_end.begin(), p.turn_end.end());
  CHECK(joined == chat.suffix(compress::kRepeatFirstPrompt));
}

TEST_CASE("kvzip refuses a scoring input that is not the prefilled document", "[compress]") {
  Setup s = setup(test::tiny_llama_config(), 4, 10);
  compress::ScorerOptions so;
  so.prompts = synthetic_prompts();
  model::Forward fwd(s.w, model::ForwardOptions{1, 64, {}});
  prefill::PrefillResult pre = prefill::prefill_document(fwd, s.prefix, s.doc);
  auto scorer = compress::make_scorer("kvzip", so);
  std::vector<int32_t> shorter(s.doc.begin(), s.doc.begin() + 9);
  CHECK_THROWS_AS(scorer->score(compress::ScoreInput{&fwd, &pre.cache, 4, shorter}), Error);
  CHECK_THROWS_AS(scorer->score(compress::ScoreInput{nullptr, &pre.cache, 4, s.doc}), Error);
}

TEST_CASE("query-aware KVzip adds each question's local attention and changes what is kept",
          "[compress]") {
  Setup s = setup(test::tiny_llama_config(), 6, 40);
  compress::ScorerOptions so;
  so.prompts = synthetic_prompts();
  so.kvzip_chunk = 16;    // chunks [0,16) [16,32) [32,40)
  so.kvzip_bf16 = false;  // fp32 passes against the float64 reference
  model::Forward fwd(s.w, model::ForwardOptions{1, 16, {}});
  prefill::PrefillOptions po;
  po.attention_bf16 = false;
  prefill::PrefillResult pre = prefill::prefill_document(fwd, s.prefix, s.doc, po);
  model::KvCache before = pre.cache;
  const compress::DocumentScores agnostic =
      compress::make_scorer("kvzip", so)->score(compress::ScoreInput{&fwd, &pre.cache, 6, s.doc});

  // Two questions (one longer than the forward chunk), made of tokens the document does not start
  // with.
  so.kvzip_queries = {test::random_tokens(5, s.cfg.vocab_size, 7),
                      test::random_tokens(19, s.cfg.vocab_size, 8)};
  auto aware_scorer = compress::make_scorer("kvzip", so);
  const compress::DocumentScores aware =
      aware_scorer->score(compress::ScoreInput{&fwd, &pre.cache, 6, s.doc});
  CHECK(pre.cache.logical_length() == 46);  // every question pass is rolled back
  bool recorded = false;
  for (const auto& [k, v] : aware_scorer->params()) recorded = recorded || k == "queries";
  CHECK(recorded);

  // Reference: per chunk the reconstruction input, then every question, as local softmaxes over
  // prefix ⊕ chunk ⊕ own keys, max-combined.
  std::vector<double> want(aware.values.size(), 0.0);
  for (uint32_t b = 0; b < 40; b += 16) {
    const uint32_t e = std::min(40u, b + 16);
    reference_chunk(s.w, before, 6, 40, compress::reconstruction_input(so.prompts, s.doc, b, e, 8),
                    b, e, want);
    for (const std::vector<int32_t>& q : so.kvzip_queries)
      reference_chunk(s.w, before, 6, 40, q, b, e, want);
  }
  double worst = 0;
  size_t raised = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(aware.values[i] - want[i]));
    CHECK(aware.values[i] >= agnostic.values[i]);  // a max over more query rows
    raised += aware.values[i] > agnostic.values[i] ? 1 : 0;
  }
  CHECK(worst < 2e-6);
  CHECK(raised > 0);

  // What is kept at 30% differs from the query-agnostic selection.
  const compress::Selection a =
      compress::select_rows(agnostic, 0.3, compress::SelectionLevel::Global);
  const compress::Selection q = compress::select_rows(aware, 0.3, compress::SelectionLevel::Global);
  CHECK(a.kept_doc == q.kept_doc);
  CHECK(a.keep != q.keep);

  so.kvzip_queries = {{}};
  CHECK_THROWS_AS(compress::make_scorer("kvzip", so), Error);
}
