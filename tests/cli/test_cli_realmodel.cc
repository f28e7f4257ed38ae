// `kvzip query` says why an answer ended ([cli][realmodel], needs $KVZIP_MODEL): a cache whose
// logical length leaves two positions of the model's context after the question stops at the
// context, which JSON reports as "stop_reason": "context_full" (with "stopped": false kept for
// older readers) and stderr explains; -n 1 reports "max_tokens". The cache is built here from
// the model's own prefix and suffix with few kept rows, so no prefill of 8k tokens is needed.
#include <catch2/catch.hpp>

#include "common/json.h"
#include "format/format.h"
#include "loader/loader.h"
#include "model/model.h"
#include "tests/format/fixtures.h"
#include "tests/support/run_cli.h"

using namespace kvzip;
using namespace kvzip::format::testing;
using namespace kvzip::testing;

namespace {

// A cache of `model` for a document of `n_doc` copies of one token, keeping per head the prefix
// rows and the last 4 document rows, with zero K/V.
format::CacheContents long_document_cache(const model::Model& model, uint32_t n_doc) {
  format::CacheContents c;
  format::CacheHeader& h = c.header;
  format::set_model(h, model.config(), model.fingerprint());
  h.tool_version = "kvzip test";
  for (int32_t t : model.chat().prefix("")) h.prefix_tokens.push_back(static_cast<uint32_t>(t));
  for (int32_t t : model.chat().suffix("")) h.suffix_tokens.push_back(static_cast<uint32_t>(t));
  const int32_t word = model.chat().encode_document(" the").back();
  h.document_tokens.assign(n_doc, static_cast<uint32_t>(word));
  h.document_text = "the";
  h.method = "test";
  const uint32_t P = static_cast<uint32_t>(h.prefix_length()), keep_doc = 4;
  h.achieved_ratio = h.requested_ratio = double(keep_doc) / n_doc;
  for (uint32_t l = 0; l < h.n_layers; ++l) {
    format::LayerKv& layer = c.layers.emplace_back();
    for (uint32_t hd = 0; hd < h.n_kv_heads; ++hd) {
      layer.head_rows.push_back(P + keep_doc);
      for (uint32_t p = 0; p < P; ++p) layer.positions.push_back(p);
      for (uint32_t p = P + n_doc - keep_doc; p < P + n_doc; ++p) layer.positions.push_back(p);
    }
    layer.k.assign(size_t(layer.positions.size()) * h.head_dim, 0.0f);
    layer.v = layer.k;
  }
  return c;
}

// ~700 tokens of SmolLM2's: one sentence 24 times, then `tail` for the model to go on from.
std::string repeated_prompt(const std::string& tail) {
  std::string prompt;
  for (int i = 0; i < 24; ++i)
    prompt += "The Normans gave their name to Normandy, a region in France, in the 10th century. ";
  return prompt + tail;
}

}  // namespace

TEST_CASE("query reports stop_reason, and explains a stop at the context limit",
          "[cli][realmodel]") {
  const std::string path = real_model_or_empty();
  if (path.empty())
    KVZIP_FORMAT_SKIP("set KVZIP_MODEL to SmolLM2-135M-Instruct.Q4_1.gguf to run this test");
  const auto model = model::Model::load(path);
  const uint32_t ctx = model->config().max_context;
  REQUIRE(ctx > 0);
  const std::string question = "What is it?";
  format::CacheContents probe = long_document_cache(*model, 16);
  const size_t q = loader::question_tokens(model->tokenizer(), probe.header, question).size();
  const uint32_t room = 2;  // positions left after the question: answers end after room + 1 tokens
  const uint32_t n_doc = ctx - static_cast<uint32_t>(probe.header.prefix_length() + q) - room;
  TempDir dir;
  format::write_cache_file(long_document_cache(*model, n_doc), dir.path("long.kvz"));
  CliOptions o;
  o.env = {{"KVZIP_MODEL", path}};
  const CliResult full =
      run_kvzip({"query", dir.path("long.kvz"), "--json", "-n", "100", question}, o);
  INFO(full.out << full.err);
  REQUIRE(full.exit_code == 0);
  if (full.out.find("\"stop_reason\":\"stop_token\"") != std::string::npos)
    KVZIP_FORMAT_SKIP("the model ended on a stop token before the context filled");
  const Json line = parse_json(full.out, "query --json");
  CHECK(line["tokens"] == room + 1);
  CHECK(line["stopped"] == false);
  CHECK(line["stop_reason"] == "context_full");
  CHECK_THAT(
      full.err,
      Catch::Matchers::Contains("kvzip: note: the answer stopped after " +
                                std::to_string(room + 1) + " of the 100 tokens -n allows") &&
          Catch::Matchers::Contains("context of " + std::to_string(ctx) + " tokens is full"));
  const CliResult one =
      run_kvzip({"query", dir.path("long.kvz"), "--json", "-n", "1", question}, o);
  CHECK(one.exit_code == 0);
  CHECK_THAT(one.out, Catch::Matchers::Contains("\"stop_reason\":\"max_tokens\"") ||
                          Catch::Matchers::Contains("\"stop_reason\":\"stop_token\""));
  CHECK_THAT(one.err, !Catch::Matchers::Contains("note"));
}

TEST_CASE(
    "KVZIP_CPU_ISA picks the kernels, every ISA gives the same tokens, and a bad name is an error",
    "[cli][realmodel]") {
  const std::string path = real_model_or_empty();
  if (path.empty())
    KVZIP_FORMAT_SKIP("set KVZIP_MODEL to SmolLM2-135M-Instruct.Q4_1.gguf to run this test");
  // A 40-token prompt: its prefill runs the GEMMs (AVX2 and AMX from 16 tokens, VNNI from 8) where
  // the CPU has them, the decode the register tiles; the scalar kernel is the reference they all
  // equal.
  const std::vector<std::string> args = {
      "generate",
      "-m",
      path,
      "-n",
      "8",
      "-t",
      "2",
      "--stats",
      "-p",
      "The Normans were the people who in the 10th and 11th centuries gave their name to "
      "Normandy, a region in France. They were descended from Norse raiders and pirates."};
  auto run_with = [&](const std::string& isa) {
    CliOptions o;
    o.env = {{"KVZIP_CPU_ISA", isa}};
    return run_kvzip(args, o);
  };
  const CliResult ref = run_with("scalar");
  INFO("stderr: " << ref.err);
  REQUIRE(ref.exit_code == 0);
  CHECK_THAT(ref.err + ref.out, Catch::Matchers::Contains("(scalar tiles up to"));
  // Each choice's --stats line names its kernels (so the variable took effect).
  const std::pair<std::string, std::string> isas[] = {
      {"", "fast: int8 activations x"},
      {"avx2", "avx2 GEMM from there"},
      {"avx512-vnni", "avx512-vnni GEMM from there"},
      {"amx-int8", "amx-int8 tile GEMM from there"},
      {"amx", "amx-int8 tile GEMM"}};
  for (const auto& [isa, kernels] : isas) {
    const CliResult r = run_with(isa);
    INFO("KVZIP_CPU_ISA=" << isa << "\nstderr: " << r.err);
    if (r.exit_code != 0) {  // an ISA this CPU lacks: refused with the list of those it has
      CHECK_THAT(r.err, Catch::Matchers::Contains(
                            "is not available on this CPU/build; available here: scalar"));
      continue;
    }
    CHECK_THAT(r.err, Catch::Matchers::Contains(kernels));
    // "amx-int8" keeps the int8 chain at every T: no bf16 tiles for the block types.
    if (isa == "amx-int8")
      CHECK_THAT(r.err, !Catch::Matchers::Contains("every block type as bf16"));
    CHECK(r.out ==
          ref.out);  // the generated text, token for token (a prompt of <= 48 tokens: int8 only)
  }
  const CliResult bad = run_with("avx9000");
  CHECK(bad.exit_code != 0);
  CHECK_THAT(
      bad.err,
      Catch::Matchers::Contains(
          "kvzip: error [unsupported]: KVZIP_CPU_ISA=avx9000 is not an instruction set name"));
}

TEST_CASE(
    "generate --attention: bf16 and fp32 prompt attention answer alike; a bad name is refused",
    "[cli][realmodel]") {
  const std::string path = real_model_or_empty();
  if (path.empty())
    KVZIP_FORMAT_SKIP("set KVZIP_MODEL to SmolLM2-135M-Instruct.Q4_1.gguf to run this test");
  // ~700 tokens: several query blocks, so the prompt's attention takes bf16 products where the CPU
  // has AVX-512 BF16 (on others both runs are fp32 and must match all the more).
  const std::string prompt = repeated_prompt("The Normans gave their name to");
  auto run_with = [&](const std::string& attention) {
    return run_kvzip({"generate", "-m", path, "-n", "4", "-t", "2", "--stats", "--attention",
                      attention, "-p", prompt});
  };
  const CliResult f32 = run_with("f32"), bf16 = run_with("bf16");
  INFO("f32 stderr: " << f32.err << "\nbf16 stderr: " << bf16.err);
  REQUIRE(f32.exit_code == 0);
  REQUIRE(bf16.exit_code == 0);
  CHECK_THAT(bf16.err, Catch::Matchers::Contains("generated 4 tokens"));
  CHECK(bf16.out == f32.out);  // greedy continuation of a repeated sentence: the same four tokens
  CHECK(bf16.out.size() > prompt.size());
  const CliResult bad = run_with("fp8");
  CHECK(bad.exit_code != 0);
  CHECK_THAT(bad.err, Catch::Matchers::Contains("--attention"));
}

TEST_CASE("generate --no-key-tiles answers token for token as with the cache's key tiles",
          "[cli][realmodel]") {
  const std::string path = real_model_or_empty();
  if (path.empty())
    KVZIP_FORMAT_SKIP("set KVZIP_MODEL to SmolLM2-135M-Instruct.Q4_1.gguf to run this test");
  // ~700 tokens: five whole 128-key tiles that the answer's steps read from the cache's copy.
  const std::string prompt = repeated_prompt("In the 11th century the Normans");
  auto run_with = [&](bool tiles) {
    std::vector<std::string> a = {"generate", "-m", path, "-n", "12", "-t", "2", "-p", prompt};
    if (!tiles) a.push_back("--no-key-tiles");
    return run_kvzip(a);
  };
  const CliResult with = run_with(true), without = run_with(false);
  INFO("stderr: " << with.err << without.err);
  REQUIRE(with.exit_code == 0);
  REQUIRE(without.exit_code == 0);
  CHECK(with.out.size() > prompt.size());
  CHECK(with.out == without.out);  // the same bits: the tiles hold the keys' own values
}
