// QuerySession with R-KV on a tiny random-weight GGUF model: answers evict rows while they are
// generated, and after every ask() the cache is exactly the compressed state again (rows,
// positions, values), for generated-only and for document candidates.
#include <catch2/catch.hpp>

#include <unistd.h>
#include <cstdlib>
#include <filesystem>

#include "compress/pipeline.h"
#include "loader/loader.h"
#include "model/model.h"
#include "tests/support/tiny_model_dir.h"

using namespace kvzip;

namespace {

struct RkvFixture : test::TinyModelDir {
  std::string kvz;  // the half-kept cache file
  uint32_t n_p = 0;

  RkvFixture() : TinyModelDir("rkv", 12) {
    compress::CacheDescription d;
    const std::string doc =
        "the cat sat on the mat. the dog ate the bone; then the cat left the "
        "house and walked to the river where the ducks swam.";
    d.prefix = model->chat().prefix("");
    d.document = model->chat().encode_document(doc);
    d.suffix = model->chat().suffix("");
    d.document_text = doc;
    n_p = static_cast<uint32_t>(d.prefix.size());
    model::Forward fwd(model->weights(), model::ForwardOptions{.threads = 1});
    model::KvCache dense(model->config());
    std::vector<int32_t> all = d.prefix;
    all.insert(all.end(), d.document.begin(), d.document.end());
    fwd.prefill(dense, all, model::LogitsMode::None);
    // Keep every other document row so the base is ragged.
    const model::CacheShape s = dense.shape();
    std::vector<std::vector<uint32_t>> keep(size_t(s.n_layers) * s.n_kv_heads);
    for (size_t i = 0; i < keep.size(); ++i)
      for (uint32_t r = 0; r < dense.logical_length(); ++r)
        if (r < n_p || (r + i) % 2 == 0) keep[i].push_back(r);
    kvz = path("half.kvz");
    format::write_cache_file(
        compress::make_contents(*model, model::RaggedKvCache::from_dense(dense, keep), {}, d), kvz);
  }
};

// Every head's rows, positions, keys and values are equal.
void require_same_cache(const model::RaggedKvCache& a, const model::RaggedKvCache& b) {
  REQUIRE(a.logical_length() == b.logical_length());
  REQUIRE(a.kept_total() == b.kept_total());
  const model::CacheShape s = a.shape();
  for (uint32_t l = 0; l < s.n_layers; ++l)
    for (uint32_t h = 0; h < s.n_kv_heads; ++h) {
      const model::KvHeadView x = a.view(l, h), y = b.view(l, h);
      REQUIRE(x.len == y.len);
      REQUIRE(a.kept(l, h) == b.kept(l, h));
      for (uint32_t r = 0; r < x.len; ++r) {
        REQUIRE(x.positions[r] == y.positions[r]);
        for (uint32_t d = 0; d < s.head_dim; ++d) {
          REQUIRE(x.k[r * s.head_dim + d] == y.k[r * s.head_dim + d]);
          REQUIRE(x.v[r * s.head_dim + d] == y.v[r * s.head_dim + d]);
        }
      }
    }
}

}  // namespace

TEST_CASE("after an R-KV answer the session's cache is the compressed state again",
          "[loader][rkv]") {
  RkvFixture f;
  loader::QuerySession s(*f.model, f.kvz);
  const model::RaggedKvCache before = s.cache();
  model::GenerateParams gp;
  gp.max_tokens = 60;
  gp.sampling.temperature = 1.0f;  // stop_tokens is empty: every answer runs 60 tokens
  gp.sampling.seed = 3;
  const loader::Answer plain = s.ask("who sat?", gp);
  require_same_cache(s.cache(), before);
  for (bool doc : {false, true}) {
    gp.rkv = model::RkvParams{};
    gp.rkv->budget = 12;
    gp.rkv->buffer = 8;
    gp.rkv->window = 4;
    gp.rkv->doc_candidates = doc;
    const loader::Answer a = s.ask("who sat?", gp);
    CHECK(a.tokens.size() == 60);
    CHECK(a.evicted > 0);
    require_same_cache(s.cache(), before);
    // The next plain answer is unaffected by the bounded one before it.
    gp.rkv.reset();
    CHECK(s.ask("who sat?", gp).tokens == plain.tokens);
  }
}
