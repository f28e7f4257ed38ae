// The forward pass against the naive reference forward of tests/support/naive_forward.h (whole
// sequence at once, every attention row materialised, double sums), on tiny random llama- and
// qwen2-style models; chunking, decode, rollback, observer and GQA behaviour.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "cache/kv_cache.h"
#include "common/error.h"
#include "model/forward.h"
#include "tests/support/naive_forward.h"
#include "tests/support/random_weights.h"

using namespace kvzip;

namespace {

using test::random_tokens;

std::vector<float> row(const std::vector<float>& m, size_t r, size_t cols) {
  return std::vector<float>(m.begin() + r * cols, m.begin() + (r + 1) * cols);
}

// Records the post-RoPE queries and the cache contents the observer is shown.
struct Recorder : model::AttentionObserver {
  std::vector<model::AttentionObservation> seen;
  std::vector<std::vector<float>> q;       // copy of obs.q per call
  std::vector<std::vector<float>> k_last;  // per call: the last T rows of every head, (T, Hkv, D)
  std::vector<std::vector<uint32_t>> pos;
  void on_attention(const model::AttentionObservation& o) override {
    seen.push_back(o);
    q.emplace_back(o.q, o.q + size_t(o.T) * o.Hq * o.D);
    pos.emplace_back(o.positions, o.positions + o.T);
    std::vector<float> k(size_t(o.T) * o.Hkv * o.D);
    for (uint32_t h = 0; h < o.Hkv; ++h) {
      model::KvHeadView view = o.cache->view(o.layer, h);
      for (uint32_t t = 0; t < o.T; ++t)
        for (uint32_t d = 0; d < o.D; ++d)
          k[(size_t(t) * o.Hkv + h) * o.D + d] = view.k[size_t(view.len - o.T + t) * o.D + d];
    }
    k_last.push_back(std::move(k));
  }
};

ModelConfig config_named(const std::string& name) {
  if (name == "qwen2") return test::tiny_qwen2_config();
  ModelConfig c = test::tiny_llama_config();
  if (name == "llama3-scaled") {
    c.rope_base = 500000.0f;
    c.rope_scaling.kind = RopeScalingKind::Llama3;
    c.rope_scaling.factor = 8.0f;
    c.rope_scaling.original_context = 64;
  }
  return c;
}

}  // namespace

TEST_CASE("forward logits equal the naive reference forward", "[model][forward]") {
  auto name = GENERATE(std::string("llama"), std::string("qwen2"), std::string("llama3-scaled"));
  INFO("model " << name);
  ModelConfig cfg = config_named(name);
  model::Weights w = test::random_weights(cfg, 1);
  auto tokens = random_tokens(37, cfg.vocab_size, 2);
  const test::NaiveForward ref = test::naive_forward(w, tokens);
  model::Forward fwd(w, model::ForwardOptions{2, 16, {}});
  model::KvCache cache(cfg);
  std::vector<float> logits = fwd.prefill(cache, tokens, model::LogitsMode::All);
  CHECK(cache.logical_length() == tokens.size());
  CHECK(test::rel_error(logits, ref.logits) < 1e-4);
  // The cache holds post-RoPE keys and the values, row == position.
  for (uint32_t l = 0; l < cfg.n_layers; ++l)
    for (uint32_t h = 0; h < cfg.n_kv_heads; ++h) {
      model::KvHeadView view = cache.view(l, h);
      REQUIRE(view.len == tokens.size());
      for (uint32_t t = 0; t < view.len; ++t) {
        REQUIRE(view.positions[t] == t);
        const float* want_k = &ref.k[l][(size_t(t) * cfg.n_kv_heads + h) * cfg.head_dim];
        const float* want_v = &ref.v[l][(size_t(t) * cfg.n_kv_heads + h) * cfg.head_dim];
        REQUIRE(test::rel_error(view.k + size_t(t) * cfg.head_dim, want_k, cfg.head_dim) < 1e-4);
        REQUIRE(test::rel_error(view.v + size_t(t) * cfg.head_dim, want_v, cfg.head_dim) < 1e-4);
      }
    }
}

TEST_CASE("chunked prefill, one-chunk prefill and token-by-token decode agree",
          "[model][forward]") {
  auto name = GENERATE(std::string("llama"), std::string("qwen2"));
  ModelConfig cfg = config_named(name);
  model::Weights w = test::random_weights(cfg, 3);
  const size_t V = cfg.vocab_size;
  auto tokens = random_tokens(29, cfg.vocab_size, 4);

  model::Forward one(w, model::ForwardOptions{2, 512, {}});
  model::KvCache c1(cfg);
  auto all = one.prefill(c1, tokens, model::LogitsMode::All);

  model::Forward chunked(w, model::ForwardOptions{2, 6, {}});
  model::KvCache c2(cfg, 3);  // also exercises cache growth
  auto all_chunked = chunked.prefill(c2, tokens, model::LogitsMode::All);
  CHECK(test::rel_error(all_chunked, all) < 1e-5);

  model::KvCache c3(cfg);
  for (size_t t = 0; t < tokens.size(); ++t) {
    auto logits = one.decode(c3, tokens[t]);
    INFO("position " << t);
    REQUIRE(test::rel_error(logits, row(all, t, V)) < 1e-5);
  }
  CHECK(c3.logical_length() == tokens.size());
}

TEST_CASE("prefill logits modes: Last is the last row of All, None returns nothing",
          "[model][forward]") {
  ModelConfig cfg = test::tiny_llama_config();
  model::Weights w = test::random_weights(cfg, 5);
  auto tokens = random_tokens(20, cfg.vocab_size, 6);
  model::Forward fwd(w, model::ForwardOptions{1, 8, {}});
  model::KvCache a(cfg), b(cfg), c(cfg);
  auto all = fwd.prefill(a, tokens, model::LogitsMode::All);
  auto last = fwd.prefill(b, tokens, model::LogitsMode::Last);
  auto none = fwd.prefill(c, tokens, model::LogitsMode::None);
  // Same math; the LM head runs as GEMV for one row and as GEMM for many, so rounding may differ.
  CHECK(test::rel_error(last, row(all, tokens.size() - 1, cfg.vocab_size)) < 1e-5);
  CHECK(none.empty());
  CHECK(c.logical_length() == tokens.size());
}

TEST_CASE("rollback then re-decode gives identical logits and positions continue correctly",
          "[model][forward]") {
  ModelConfig cfg = test::tiny_qwen2_config();
  model::Weights w = test::random_weights(cfg, 7);
  auto doc = random_tokens(25, cfg.vocab_size, 8);
  auto answer = random_tokens(5, cfg.vocab_size, 9);
  model::Forward fwd(w, model::ForwardOptions{2, 512, {}});
  model::KvCache cache(cfg);
  fwd.prefill(cache, doc, model::LogitsMode::None);
  std::vector<std::vector<float>> first, second;
  for (int32_t t : answer) first.push_back(fwd.decode(cache, t));
  cache.rollback(25);
  CHECK(cache.logical_length() == 25);
  for (int32_t t : answer) second.push_back(fwd.decode(cache, t));
  CHECK(first == second);

  // Rolling back into the document and continuing equals a fresh run of the edited sequence.
  cache.rollback(10);
  std::vector<int32_t> edited(doc.begin(), doc.begin() + 10);
  edited.insert(edited.end(), answer.begin(), answer.end());
  auto continued = fwd.prefill(cache, answer, model::LogitsMode::Last);
  model::KvCache fresh(cfg);
  auto direct = fwd.prefill(fresh, edited, model::LogitsMode::Last);
  CHECK(test::rel_error(continued, direct) < 1e-5);
  CHECK_THROWS_AS(cache.rollback(16), Error);  // beyond the length
}

TEST_CASE("a prompt's bf16 scope leaves decode steps on fp32 attention", "[model][forward]") {
  // generate() keeps the scope for its whole run: the prompt (a document) takes bf16 products,
  // the answer's decode steps must still see the cache through fp32 ones, as query's do.
  ModelConfig cfg = test::tiny_llama_config();  // head_dim 16: the bf16 path can take it
  model::Weights w = test::random_weights(cfg, 21);
  auto doc = random_tokens(150, cfg.vocab_size, 22);  // several 128-key blocks
  auto answer = random_tokens(4, cfg.vocab_size, 23);
  model::Forward fwd(w, model::ForwardOptions{2, 512, {}});
  model::KvCache scoped(cfg), plain(cfg), fp32(cfg);
  std::vector<std::vector<float>> in_scope, after_scope;
  std::vector<float> doc_bf16;
  {
    const model::PromptBf16Scope bf16(fwd, true);
    doc_bf16 = fwd.prefill(scoped, doc, model::LogitsMode::Last);
    for (int32_t t : answer) in_scope.push_back(fwd.decode(scoped, t));
    fwd.prefill(plain, doc, model::LogitsMode::None);
  }
  for (int32_t t : answer) after_scope.push_back(fwd.decode(plain, t));
  CHECK(in_scope == after_scope);
  const std::vector<float> doc_plain = fwd.prefill(fp32, doc, model::LogitsMode::Last);
  if (kernels::attention_bf16_available())
    CHECK(doc_bf16 != doc_plain);  // the scope did reach the prompt
  else
    WARN(
        "no AVX-512 BF16 here: both prompts take fp32 products, only the decode bits are compared");
}

TEST_CASE("the observer sees post-RoPE queries, positions and the cache including new rows",
          "[model][forward]") {
  ModelConfig cfg = test::tiny_llama_config();
  model::Weights w = test::random_weights(cfg, 10);
  auto tokens = random_tokens(23, cfg.vocab_size, 11);
  const test::NaiveForward ref = test::naive_forward(w, tokens);
  model::Forward fwd(w, model::ForwardOptions{2, 10, {}});
  model::KvCache cache(cfg);
  Recorder rec;
  fwd.prefill(cache, tokens, model::LogitsMode::None, &rec);
  // Chunks of 10, 10, 3 tokens, each observed once per layer in layer order.
  REQUIRE(rec.seen.size() == 3 * cfg.n_layers);
  const uint32_t D = cfg.head_dim, Hq = cfg.n_heads, Hkv = cfg.n_kv_heads;
  for (size_t i = 0; i < rec.seen.size(); ++i) {
    const model::AttentionObservation& o = rec.seen[i];
    const uint32_t chunk = static_cast<uint32_t>(i / cfg.n_layers), p0 = chunk * 10;
    INFO("observation " << i);
    CHECK(o.layer == i % cfg.n_layers);
    CHECK(o.T == (chunk < 2 ? 10u : 3u));
    CHECK(o.Hq == Hq);
    CHECK(o.Hkv == Hkv);
    CHECK(o.D == D);
    CHECK(o.scale == Approx(0.25f));
    for (uint32_t t = 0; t < o.T; ++t) CHECK(rec.pos[i][t] == p0 + t);
    const float* want_q = &ref.q[o.layer][size_t(p0) * Hq * D];
    const float* want_k = &ref.k[o.layer][size_t(p0) * Hkv * D];
    CHECK(test::rel_error(rec.q[i].data(), want_q, rec.q[i].size()) < 1e-4);
    CHECK(test::rel_error(rec.k_last[i].data(), want_k, rec.k_last[i].size()) < 1e-4);
  }
}

TEST_CASE("query head h attends through KV head h / G", "[model][forward]") {
  // Zero the value projection of KV head 1 in layer 0: the attention output of exactly the query
  // heads of group 1 (heads 2 and 3 with G = 2) must then be zero, and of group 0 non-zero.
  ModelConfig cfg = test::tiny_llama_config();
  model::Weights w = test::random_weights(cfg, 12);
  const uint32_t D = cfg.head_dim, E = cfg.d_model, Hq = cfg.n_heads;
  std::vector<float> wv = to_f32(w.layers[0].wv);
  std::fill(wv.begin() + size_t(D) * E, wv.begin() + 2 * size_t(D) * E, 0.0f);
  w.layers[0].wv = model::Matrix::from_f32(wv, w.layers[0].wv.rows, E);
  std::vector<float> attn;
  model::ForwardOptions opt{1, 512, [&](const model::TraceTensor& t) {
                              if (std::string(t.name) == "attn" && t.layer == 0)
                                attn.assign(t.data, t.data + size_t(t.rows) * t.cols);
                            }};
  model::Forward fwd(w, opt);
  model::KvCache cache(cfg);
  auto tokens = random_tokens(9, cfg.vocab_size, 13);
  fwd.prefill(cache, tokens, model::LogitsMode::None);
  REQUIRE(attn.size() == tokens.size() * Hq * D);
  for (size_t t = 0; t < tokens.size(); ++t)
    for (uint32_t h = 0; h < Hq; ++h) {
      double norm = 0;
      for (uint32_t d = 0; d < D; ++d) norm += std::fabs(attn[(t * Hq + h) * D + d]);
      INFO("token " << t << " head " << h);
      if (h / 2 == 1) {
        CHECK(norm == 0.0);
      } else {
        CHECK(norm > 0.0);
      }
    }
}

TEST_CASE("a bad token id is rejected and leaves the cache untouched", "[model][forward]") {
  ModelConfig cfg = test::tiny_llama_config();
  model::Weights w = test::random_weights(cfg, 14);
  model::Forward fwd(w, model::ForwardOptions{1, 4, {}});
  model::KvCache cache(cfg);
  fwd.prefill(cache, random_tokens(6, cfg.vocab_size, 15), model::LogitsMode::None);
  std::vector<int32_t> bad = {1, 2, static_cast<int32_t>(cfg.vocab_size)};
  CHECK_THROWS_AS(fwd.prefill(cache, bad), Error);
  CHECK_THROWS_AS(fwd.decode(cache, -1), Error);
  CHECK(cache.logical_length() == 6);
}

TEST_CASE("an observer that throws leaves the cache at its length before the call",
          "[model][forward]") {
  struct Thrower : model::AttentionObserver {
    void on_attention(const model::AttentionObservation& o) override {
      if (o.layer == 1 && o.positions[0] >= 8) throw Error(Errc::internal, "observer failed");
    }
  } thrower;
  ModelConfig cfg = test::tiny_llama_config();
  model::Weights w = test::random_weights(cfg, 16);
  model::Forward fwd(w, model::ForwardOptions{1, 4, {}});
  model::KvCache cache(cfg);
  fwd.prefill(cache, random_tokens(3, cfg.vocab_size, 17), model::LogitsMode::None);
  CHECK_THROWS_AS(
      fwd.prefill(cache, random_tokens(9, cfg.vocab_size, 18), model::LogitsMode::Last, &thrower),
      Error);
  CHECK(cache.logical_length() == 3);
  for (uint32_t l = 0; l < cfg.n_layers; ++l) CHECK(cache.view(l, 0).len == 3);
}

TEST_CASE("Forward rejects weights whose sizes disagree with the config and mismatched caches",
          "[model][forward]") {
  ModelConfig cfg = test::tiny_llama_config();
  model::Weights w = test::random_weights(cfg, 19);
  w.layers[1].w_up.cols -= 1;
  CHECK_THROWS_WITH(model::Forward(w), Catch::Contains("layers[1].w_up"));
  model::Weights ok = test::random_weights(cfg, 19);
  model::Forward fwd(ok, model::ForwardOptions{1, 4, {}});
  ModelConfig other = cfg;
  other.n_kv_heads = 1;
  model::KvCache wrong(other);
  CHECK_THROWS_AS(fwd.decode(wrong, 1), Error);
}

TEST_CASE("layer_values are the values a prefill computes at that layer, and leave the cache",
          "[model][forward]") {
  auto name = GENERATE(std::string("llama"), std::string("qwen2"));
  ModelConfig cfg = config_named(name);
  model::Weights w = test::random_weights(cfg, 21);
  const auto prefix = random_tokens(9, cfg.vocab_size, 22),
             tokens = random_tokens(13, cfg.vocab_size, 23);
  const size_t kvd = size_t(cfg.n_kv_heads) * cfg.head_dim;
  for (uint32_t layer : {0u, 1u}) {
    INFO(name << " layer " << layer);
    std::vector<float> traced;  // the "v" a full prefill of the tokens computes at `layer`
    model::ForwardOptions to{1, 512, {}};
    to.trace = [&](const model::TraceTensor& t) {
      if (t.layer == int(layer) && std::string(t.name) == "v")
        traced.assign(t.data, t.data + size_t(t.rows) * t.cols);
    };
    model::Forward tracing(w, to);
    model::KvCache a(cfg);
    tracing.prefill(a, prefix, model::LogitsMode::None);
    traced.clear();
    tracing.prefill(a, tokens, model::LogitsMode::Last);
    REQUIRE(traced.size() == tokens.size() * kvd);

    model::Forward fwd(w, model::ForwardOptions{2, 4, {}});  // a chunk shorter than the tokens
    model::KvCache b(cfg);
    fwd.prefill(b, prefix, model::LogitsMode::None);
    const std::vector<float> v = fwd.layer_values(b, tokens, layer);
    CHECK(b.logical_length() == prefix.size());
    CHECK(test::rel_error(v, traced) < 1e-5);
    // The cache is as it was: a prefill after the probe gives the one-pass logits.
    const auto after = fwd.prefill(b, tokens, model::LogitsMode::Last);
    model::KvCache c(cfg);
    fwd.prefill(c, prefix, model::LogitsMode::None);
    CHECK(test::rel_error(after, fwd.prefill(c, tokens, model::LogitsMode::Last)) < 1e-6);
  }
}

TEST_CASE("a prefill's own chunk length gives the logits of the options' chunk",
          "[model][forward]") {
  ModelConfig cfg = test::tiny_llama_config();
  model::Weights w = test::random_weights(cfg, 24);
  const auto tokens = random_tokens(37, cfg.vocab_size, 25);
  model::Forward fwd(w, model::ForwardOptions{2, 5, {}});
  model::KvCache a(cfg), b(cfg);
  const auto by5 = fwd.prefill(a, tokens, model::LogitsMode::All);
  const auto by16 =
      fwd.prefill(b, tokens, model::LogitsMode::All, nullptr, 16);  // grows the scratch
  CHECK(test::rel_error(by16, by5) < 1e-5);
  model::KvCache c(cfg);  // and the options' chunk still works after the scratch grew
  CHECK(test::rel_error(fwd.prefill(c, tokens, model::LogitsMode::All), by5) < 1e-6);
}
