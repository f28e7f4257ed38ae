// The real Gemma 3 270M: kvzip's fp32 path (ForwardOptions::matmul = Exact) chooses the same 32
// greedy tokens as an independent fp32 implementation on the three prompts of
// bench/llamacpp/compare_llamacpp.py. The truth, tests/golden/greedy_gemma3.json, is transformers'
// Gemma3ForCausalLM in float32 on the GGUF's weights dequantized by the `gguf` package
// (scripts/golden/make_gemma3_greedy_golden.py; float64 chooses the same tokens, and the closest
// top-1/top-2 gap on these paths is 0.005 nats, far above fp32 noise of ~3e-5 in the logits).
// Prompt ids are kvzip's own tokenizer's, checked against the golden's. About 6 s; skipped when the
// model is absent.
#include <catch2/catch.hpp>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "model/forward.h"
#include "model/model.h"
#include "tests/support/skip.h"
#include "tests/support/source_path.h"

using namespace kvzip;

TEST_CASE("Gemma 3 270M: fp32 greedy continuations equal transformers' for 32 tokens",
          "[realmodel][gemma3]") {
  KVZIP_GEMMA_MODEL_PATH_OR_SKIP(path);
  std::ifstream in(kvzip::test::source_path("tests/golden/greedy_gemma3.json"));
  REQUIRE(in);
  const nlohmann::json golden = nlohmann::json::parse(in);
  REQUIRE(golden["cases"].size() == 3);

  const std::unique_ptr<model::Model> m = model::Model::load(path);
  model::ForwardOptions fo;
  fo.matmul = kernels::MatmulPath::Exact;
  model::Forward fwd(m->weights(), fo);
  for (const auto& c : golden["cases"]) {
    const std::string prompt_text = c["prompt"].get<std::string>();
    const std::vector<int32_t> want_prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> want = c["ids"].get<std::vector<int32_t>>();
    REQUIRE(want.size() == golden["n"].get<size_t>());
    std::vector<int32_t> prompt{m->tokenizer().bos()};
    const std::vector<int32_t> text = m->tokenizer().encode(prompt_text, false);
    prompt.insert(prompt.end(), text.begin(), text.end());
    INFO("prompt: " << prompt_text);
    REQUIRE(prompt == want_prompt);

    model::KvCache cache(m->config(), static_cast<uint32_t>(prompt.size() + want.size()));
    model::GenerateParams gp;
    gp.max_tokens =
        static_cast<uint32_t>(want.size());  // no stop tokens: the reference ran 32 steps
    const std::vector<int32_t> got = generate(fwd, cache, prompt, gp).tokens;
    INFO("kvzip: " << m->tokenizer().decode(got));
    INFO("reference: " << c["text"].get<std::string>());
    CHECK(got == want);
  }
}
