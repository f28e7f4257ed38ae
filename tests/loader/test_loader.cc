// Loader tests on a tiny random-weight GGUF model: a cache written to a .kvz and answered from
// through QuerySession gives exactly the tokens of a plain prefill of the same prompt when nothing
// is evicted; answers do not depend on earlier questions (rollback); foreign caches are refused.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <cstdio>
#include <filesystem>

#include "common/error.h"
#include "compress/pipeline.h"
#include "loader/loader.h"
#include "model/model.h"
#include "tests/support/tiny_model_dir.h"

using namespace kvzip;

namespace {

struct Fixture : test::TinyModelDir {
  Fixture() : TinyModelDir("loader", 11) {}

  compress::CacheDescription describe(const std::string& doc) const {
    compress::CacheDescription d;
    d.prefix = model->chat().prefix("");
    d.document = model->chat().encode_document(doc);
    d.suffix = model->chat().suffix("");
    d.document_text = doc;
    return d;
  }

  model::KvCache prefill(const compress::CacheDescription& d) const {
    model::Forward fwd(model->weights(), model::ForwardOptions{1});
    model::KvCache dense(model->config());
    std::vector<int32_t> all = d.prefix;
    all.insert(all.end(), d.document.begin(), d.document.end());
    fwd.prefill(dense, all, model::LogitsMode::None);
    return dense;
  }

  std::string write(const compress::CacheDescription& d, const model::RaggedKvCache& r,
                    const std::string& name) const {
    const std::string path = this->path(name);
    format::write_cache_file(compress::make_contents(*model, r, {}, d), path);
    return path;
  }
};

std::vector<std::vector<uint32_t>> keep_all(const model::KvCache& dense) {
  const model::CacheShape s = dense.shape();
  std::vector<std::vector<uint32_t>> keep(size_t(s.n_layers) * s.n_kv_heads);
  for (auto& k : keep)
    for (uint32_t i = 0; i < dense.logical_length(); ++i) k.push_back(i);
  return keep;
}

model::GenerateParams greedy(uint32_t n) {
  model::GenerateParams p;
  p.max_tokens = n;
  return p;
}

const char* kDoc = "the cat sat on the mat. the dog ate the bone; then the cat left.";

}  // namespace

TEST_CASE("answers from an uncompressed .kvz equal a plain prefill of the same prompt",
          "[loader]") {
  Fixture f;
  const auto d = f.describe(kDoc);
  model::KvCache dense = f.prefill(d);
  const std::string path =
      f.write(d, model::RaggedKvCache::from_dense(dense, keep_all(dense)), "full.kvz");

  loader::QuerySession session(*f.model, path);
  CHECK(session.header().achieved_ratio == Approx(1.0));
  for (const char* q : {"who sat?", "what did the dog eat?"}) {
    const loader::Answer a = session.ask(q, greedy(10));
    // The same prompt, prefilled from scratch into a dense cache.
    std::vector<int32_t> prompt = d.prefix;
    prompt.insert(prompt.end(), d.document.begin(), d.document.end());
    const auto tail = loader::question_tokens(f.model->tokenizer(), session.header(), q);
    prompt.insert(prompt.end(), tail.begin(), tail.end());
    model::Forward fwd(f.model->weights(), model::ForwardOptions{1});
    model::KvCache fresh(f.model->config());
    const model::GenerateResult plain = generate(fwd, fresh, prompt, greedy(10));
    REQUIRE(!a.tokens.empty());
    CHECK(a.tokens == plain.tokens);
    REQUIRE(a.first_logits.size() == plain.first_logits.size());
    for (size_t i = 0; i < a.first_logits.size(); ++i)
      REQUIRE(a.first_logits[i] == Approx(plain.first_logits[i]).margin(1e-4));
  }
}

TEST_CASE("an answer does not depend on the questions asked before it", "[loader]") {
  Fixture f;
  const auto d = f.describe(kDoc);
  model::KvCache dense = f.prefill(d);
  // Evict every other document row of each head so the ragged path is exercised.
  auto keep = keep_all(dense);
  const uint32_t n_p = static_cast<uint32_t>(d.prefix.size());
  for (size_t i = 0; i < keep.size(); ++i) {
    std::vector<uint32_t> k;
    for (uint32_t r : keep[i])
      if (r < n_p || (r + i) % 2 == 0) k.push_back(r);
    keep[i] = k;
  }
  const std::string path = f.write(d, model::RaggedKvCache::from_dense(dense, keep), "half.kvz");
  loader::QuerySession s(*f.model, path);
  CHECK(s.header().achieved_ratio == Approx(0.5).margin(0.05));
  const uint64_t kept = s.cache().kept_total();
  const auto a1 = s.ask("who sat?", greedy(8));
  const auto b =
      s.ask("a much longer question about the dog and the bone and the mat?", greedy(20));
  const auto a2 = s.ask("who sat?", greedy(8));
  CHECK(a1.tokens == a2.tokens);
  CHECK(a1.text == a2.text);
  CHECK(s.cache().kept_total() == kept);
  CHECK(s.cache().logical_length() == d.prefix.size() + d.document.size());
}

TEST_CASE("a cache made by another model is refused unless forced", "[loader]") {
  Fixture f;
  const auto d = f.describe(kDoc);
  model::KvCache dense = f.prefill(d);
  auto contents = compress::make_contents(
      *f.model, model::RaggedKvCache::from_dense(dense, keep_all(dense)), {}, d);
  contents.header.model.weights_hash ^= 1;
  const std::string path = (f.dir / "other.kvz").string();
  format::write_cache_file(contents, path);
  try {
    loader::QuerySession s(*f.model, path);
    FAIL("expected model_mismatch");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::model_mismatch);
  }
  loader::SessionOptions o;
  o.force = true;
  loader::QuerySession s(*f.model, path, o);
  CHECK(!s.ask("who?", greedy(3)).tokens.empty());
}

TEST_CASE("a cache read back from a file equals the cache that was written", "[loader]") {
  Fixture f;
  const auto d = f.describe(kDoc);
  model::KvCache dense = f.prefill(d);
  auto keep = keep_all(dense);
  keep[1].erase(keep[1].begin() + 3, keep[1].begin() + 9);
  const model::RaggedKvCache r = model::RaggedKvCache::from_dense(dense, keep);
  const auto contents = compress::make_contents(*f.model, r, {}, d);
  const model::RaggedKvCache back = loader::cache_from_contents(contents);
  const std::string path = f.write(d, r, "rt.kvz");
  const model::RaggedKvCache fromfile = loader::cache_from_reader(format::CacheReader::open(path));
  const model::CacheShape s = r.shape();
  for (const model::RaggedKvCache* c : {&back, &fromfile}) {
    REQUIRE(c->logical_length() == r.logical_length());
    for (uint32_t l = 0; l < s.n_layers; ++l)
      for (uint32_t h = 0; h < s.n_kv_heads; ++h) {
        REQUIRE(c->kept(l, h) == r.kept(l, h));
        const size_t n = r.kept(l, h);
        CHECK(std::equal(r.positions(l, h), r.positions(l, h) + n, c->positions(l, h)));
        CHECK(std::equal(r.k_rows(l, h), r.k_rows(l, h) + n * s.head_dim, c->k_rows(l, h)));
        CHECK(std::equal(r.v_rows(l, h), r.v_rows(l, h) + n * s.head_dim, c->v_rows(l, h)));
      }
  }
}

TEST_CASE("question tokens follow the stored query template and suffix", "[loader]") {
  Fixture f;
  format::CacheHeader h;
  h.suffix_tokens = {2, 5};
  auto ids = loader::question_tokens(f.model->tokenizer(), h, "hi");
  auto tail = f.model->tokenizer().encode("\n\nQuestion: hi", false);
  tail.push_back(2);
  tail.push_back(5);
  CHECK(ids == tail);
  h.params.push_back({"query_template", "no placeholder"});
  CHECK_THROWS_AS(loader::question_tokens(f.model->tokenizer(), h, "hi"), Error);
}
