// The real Gemma 3 270M (Q4_K_M GGUF; scripts/fetch-model.sh gemma3-270m or $KVZIP_GEMMA_MODEL):
// the configuration read off the file (local layers 0-4, 6-10, 12-16; window 512; head dim 256),
// the greedy continuation and the perplexity of the Normans article's opening
// (examples/normans.json) that transformers gives for the same file (its GGUF loader dequantizes to
// fp32, eager attention: " the capital of the country of France. It is the largest", perplexity
// 18.93 over 255 tokens after BOS), and KVzip at ratio 0.4 keeping a needle from a 648-token
// document (longer than the window: only the three global layers can reach it). About 4 s each.
// Skipped when the model is absent.
#include <catch2/catch.hpp>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "compress/pipeline.h"
#include "model/forward.h"
#include "model/model.h"
#include "tests/support/skip.h"
#include "tests/support/source_path.h"

using namespace kvzip;

namespace {

std::string normans_document() {
  std::ifstream in(kvzip::test::source_path("examples/normans.json"));
  REQUIRE(in);
  const nlohmann::json j = nlohmann::json::parse(in);
  std::string doc;
  for (const auto& p : j["data"][0]["paragraphs"])
    doc += (doc.empty() ? "" : "\n\n") + p["context"].get<std::string>();
  return doc + "\n";
}

std::string greedy_text(const model::Model& m, const std::vector<int32_t>& prompt, uint32_t n) {
  model::Forward fwd(m.weights());
  model::KvCache cache(m.config(), static_cast<uint32_t>(prompt.size()) + n);
  model::GenerateParams gp;
  gp.max_tokens = n;
  gp.stop_tokens = {m.tokenizer().eos()};
  return m.tokenizer().decode(generate(fwd, cache, prompt, gp).tokens);
}

}  // namespace

TEST_CASE("Gemma 3 270M: configuration, greedy continuation and perplexity",
          "[realmodel][gemma3]") {
  KVZIP_GEMMA_MODEL_PATH_OR_SKIP(path);
  const std::unique_ptr<model::Model> m = model::Model::load(path);
  const ModelConfig& c = m->config();
  CHECK(c.arch == "gemma3");
  CHECK(c.n_layers == 18);
  CHECK(c.head_dim == 256);
  CHECK(c.n_heads == 4);
  CHECK(c.n_kv_heads == 1);
  CHECK(c.sliding_window == 512);
  CHECK(c.rope_base == 1e6f);
  CHECK(c.rope_local_base == 1e4f);
  CHECK(c.tied_embeddings);
  for (uint32_t l = 0; l < c.n_layers; ++l) CHECK(c.is_local(l) == (l != 5 && l != 11 && l != 17));
  CHECK(m->chat().format() == model::ChatFormat::Plain);  // a base model: no chat template

  std::vector<int32_t> prompt{m->tokenizer().bos()};
  const std::vector<int32_t> text = m->tokenizer().encode("The capital of France is", false);
  prompt.insert(prompt.end(), text.begin(), text.end());
  const std::string cont = greedy_text(*m, prompt, 8);
  INFO("continuation: " << cont);
  CHECK(cont == " the capital of the country of France.");

  // The article's opening, 255 tokens after BOS: English Wikipedia text the model predicts well.
  const std::vector<int32_t> doc = m->tokenizer().encode(normans_document(), false);
  REQUIRE(doc.size() > 4000);
  model::Forward fwd(m->weights());
  const model::PerplexityResult r =
      model::perplexity(fwd, std::span<const int32_t>(doc.data(), 255), 256, m->tokenizer().bos());
  INFO("perplexity " << r.perplexity);
  CHECK(r.scored == 255);
  CHECK(r.perplexity > 18.93 * 0.95);  // int8-rounded activations (the fast path) move it a little
  CHECK(r.perplexity < 18.93 * 1.05);
}

TEST_CASE("Gemma 3 270M: KVzip keeps a needle from a document longer than the window",
          "[realmodel][gemma3]") {
  KVZIP_GEMMA_MODEL_PATH_OR_SKIP(path);
  const std::unique_ptr<model::Model> m = model::Model::load(path);
  std::string text =
      "The secret code of the vault is 4817.\n\n" + normans_document().substr(0, 3000);
  const compress::DocumentPrompt p = compress::document_prompt(m->chat(), text, "");
  REQUIRE(p.document.size() > m->config().sliding_window);
  model::Forward fwd(m->weights());
  compress::CompressOptions co;
  co.ratio =
      0.4;  // measured: KVzip answers 4817 at 0.4 and 0.5; SnapKV and StreamingLLM not at 0.5
  co.scorer = compress::make_scorer_options(m->chat(), 2048, 0);
  compress::CompressResult r = compress::compress(fwd, p.prefix, p.document, co);
  std::vector<int32_t> q = m->chat().suffix("\n\nQuestion: What is the secret code of the vault?");
  model::GenerateParams gp;
  gp.max_tokens = 16;
  gp.stop_tokens = m->chat().stop_tokens();
  const std::string answer = m->tokenizer().decode(generate(fwd, r.cache, q, gp).tokens);
  INFO("answer: " << answer << " (achieved " << r.achieved_ratio << ")");
  CHECK(answer.find("4817") != std::string::npos);
}
