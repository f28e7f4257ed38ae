// On the real SmolLM2-135M-Instruct ([realmodel], needs $KVZIP_MODEL): the KVzip pipeline with the
// model's own chat template and reconstruction prompts, at ratio 1, answers a question token for
// token like the uncompressed cache of the same prefill; at ratio 0.3 it keeps exactly that share.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>

#include "compress/pipeline.h"
#include "model/model.h"
#include "prefill/prefill.h"

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
  const char* env = std::getenv("KVZIP_MODEL");
  if (!env || !*env || !std::filesystem::exists(env)) {
    WARN("skipped: set KVZIP_MODEL to the SmolLM2-135M-Instruct.Q4_1.gguf path");
    return;
  }
  auto model = Model::load(env);
  const ChatTemplate& chat = model->chat();
  Forward fwd(model->weights(), ForwardOptions{});
  const std::vector<int32_t> prefix = chat.prefix("");
  const std::vector<int32_t> doc = chat.encode_document(kText);
  const std::vector<int32_t> question = chat.suffix("\n\nQuestion: In what country is Normandy?");
  GenerateParams gp;
  gp.max_tokens = 16;
  gp.stop_tokens = chat.stop_tokens();

  CompressOptions co;
  co.ratio = 1.0;
  co.scorer.prompts = reconstruction_prompts(chat);
  co.scorer.kvzip_chunk = 40;  // several reconstruction chunks even for this short text
  CompressResult r = compress(fwd, prefix, doc, co);
  REQUIRE(r.achieved_ratio == 1.0);
  const GenerateResult got = generate(fwd, r.cache, question, gp);

  PrefillResult plain = prefill_document(fwd, prefix, doc);
  const GenerateResult want = generate(fwd, plain.cache, question, gp);
  INFO("answer: " << model->tokenizer().decode(want.tokens));
  CHECK_FALSE(want.tokens.empty());
  CHECK(got.tokens == want.tokens);

  co.ratio = 0.3;
  CompressResult small = compress(fwd, prefix, doc, co);
  const uint64_t N = uint64_t(30) * 3 * doc.size();
  CHECK(small.cache.kept_total() == uint64_t(30) * 3 * prefix.size() + uint64_t(std::llround(0.3 * N)));
}
