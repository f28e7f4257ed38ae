// On the real SmolLM2-135M-Instruct ([realmodel], needs $KVZIP_MODEL): the KVzip pipeline with the
// model's own chat template and reconstruction prompts, at ratio 1, answers a question token for
// token like the uncompressed cache of the same prefill; at ratio 0.3 it keeps exactly that share.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "cache/kv_cache.h"
#include "compress/pipeline.h"
#include "eval/squad.h"
#include "model/model.h"
#include "model/prefill.h"
#include "tests/support/skip.h"
#include "tests/support/source_path.h"

using namespace kvzip;

namespace {

const char* kText =
    "The Normans were the people who in the 10th and 11th centuries gave their name to Normandy, "
    "a region in France. They were descended from Norse raiders and pirates from Denmark, Iceland "
    "and Norway who, under their leader Rollo, agreed to swear fealty to King Charles III of West "
    "Francia. Through generations of assimilation and mixing with the native Frankish and "
    "Roman-Gaulish populations, their descendants would gradually merge with the Carolingian-based "
    "cultures of West Francia.";

}  // namespace

TEST_CASE("on SmolLM2 a ratio-1 KVzip cache answers like the uncompressed cache",
          "[compress][realmodel]") {
  KVZIP_REAL_MODEL_PATH_OR_SKIP(env);
  auto model = model::Model::load(env);
  const model::ChatTemplate& chat = model->chat();
  model::Forward fwd(model->weights(), model::ForwardOptions{});
  const std::vector<int32_t> prefix = chat.prefix("");
  const std::vector<int32_t> doc = chat.encode_document(kText);
  const std::vector<int32_t> question = chat.suffix("\n\nQuestion: In what country is Normandy?");
  model::GenerateParams gp;
  gp.max_tokens = 16;
  gp.stop_tokens = chat.stop_tokens();

  compress::CompressOptions co;
  co.ratio = 1.0;
  co.scorer.prompts = compress::reconstruction_prompts(chat);
  co.scorer.kvzip_chunk = 40;  // several reconstruction chunks even for this short text
  compress::CompressResult r = compress::compress(fwd, prefix, doc, co);
  REQUIRE(r.achieved_ratio == 1.0);
  const model::GenerateResult got = generate(fwd, r.cache, question, gp);

  prefill::PrefillResult plain = prefill::prefill_document(fwd, prefix, doc);
  const model::GenerateResult want = generate(fwd, plain.cache, question, gp);
  INFO("answer: " << model->tokenizer().decode(want.tokens));
  CHECK_FALSE(want.tokens.empty());
  CHECK(got.tokens == want.tokens);

  co.ratio = 0.3;
  compress::CompressResult small = compress::compress(fwd, prefix, doc, co);
  const uint64_t N = uint64_t(30) * 3 * doc.size();
  CHECK(small.cache.kept_total() ==
        uint64_t(30) * 3 * prefix.size() + uint64_t(std::llround(0.3 * N)));
}

// The accuracy bar for the fast matmul path: at ratio 0.3 on the Normans article its kept
// (layer, head, position) set overlaps the exact path's with Jaccard >= 0.97, and its perplexity
// over the article is within 1% of the exact path's — over 128-token pieces and token by token.
TEST_CASE("on the Normans article the fast matmul path keeps the exact path's KVzip set",
          "[compress][realmodel]") {
  KVZIP_REAL_MODEL_PATH_OR_SKIP(env);
  auto model = model::Model::load(env);
  const model::ChatTemplate& chat = model->chat();
  const std::vector<eval::Document> docs =
      eval::read_squad(kvzip::test::source_path("examples/normans.json"), eval::SquadOptions{});
  REQUIRE(!docs.empty());
  const std::vector<int32_t> prefix = chat.prefix("");
  const std::vector<int32_t> doc = chat.encode_document(docs[0].text);
  REQUIRE(doc.size() > 4000);
  compress::CompressOptions co;
  co.ratio = 0.3;
  co.scorer.prompts = compress::reconstruction_prompts(chat);
  model::ForwardOptions fast, exact;
  exact.matmul = kernels::MatmulPath::Exact;
  model::Forward ff(model->weights(), fast), fe(model->weights(), exact);
  const compress::CompressResult a = compress::compress(ff, prefix, doc, co),
                                 b = compress::compress(fe, prefix, doc, co);
  const ModelConfig& c = model->config();
  uint64_t both = 0, either = 0;
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    for (uint32_t h = 0; h < c.n_kv_heads; ++h) {
      const uint32_t* pa = a.cache.positions(l, h);
      const uint32_t* pb = b.cache.positions(l, h);
      const std::set<uint32_t> sa(pa, pa + a.cache.kept(l, h)), sb(pb, pb + b.cache.kept(l, h));
      for (uint32_t p : sa) both += sb.count(p);
      either += sa.size() + sb.size();
    }
  }
  either -= both;
  const double jaccard = double(both) / double(either);
  WARN("fast vs exact kept set at ratio 0.3: Jaccard " << jaccard);
  CHECK(jaccard >= 0.97);

  const std::vector<int32_t> text = model->tokenizer().encode(docs[0].text, false);
  const model::PerplexityResult pf = model::perplexity(ff, text, 512),
                                pe = model::perplexity(fe, text, 512);
  WARN("perplexity on the article: fast " << pf.perplexity << ", exact " << pe.perplexity);
  CHECK(std::fabs(pf.perplexity - pe.perplexity) <= 0.01 * pe.perplexity);

  // Compress and perplexity() run chunks of 128+ tokens (the VNNI GEMM or fp32 slabs); score the
  // article's first 512 tokens token by token as well, through the decode tiles. The bound is
  // wider than the chunked one because 512 tokens measure the int8 rounding's effect only to
  // about half a percent: an activation that moves by an fp32 rounding can flip an int8 code, so
  // the fast path's per-token errors are a noise sample, not a fixed offset. Measured (2026-12-02):
  // +0.41% with the per-lane tile sums before 078d0fe, +1.05% with qdot's one chain — while over
  // the first 5,456 tokens in windows of 32 and 2,037 in windows of 4 the one chain scores 0.11%
  // and 0.17% lower perplexity than the per-lane sums (commit 08ba02e).
  auto decode_perplexity = [&](model::Forward& f) {
    const size_t n = std::min<size_t>(512, text.size());
    model::KvCache cache(c, uint32_t(n));
    double nll = 0.0;
    for (size_t i = 0; i + 1 < n; ++i) {
      const std::vector<float> row = f.decode(cache, text[i]);
      const float mx = *std::max_element(row.begin(), row.end());
      double sum = 0.0;
      for (float v : row) sum += std::exp(double(v) - mx);
      nll += std::log(sum) + mx - row[size_t(text[i + 1])];
    }
    return std::exp(nll / double(n - 1));
  };
  const double df = decode_perplexity(ff), de = decode_perplexity(fe);
  WARN("perplexity of the first 512 tokens, token by token: fast " << df << ", exact " << de);
  CHECK(std::fabs(df - de) <= 0.02 * de);
}
