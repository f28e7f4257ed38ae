// Query sessions on q8/q4 files attend to the stored rows in place (QuantBase + BranchCache, the
// default on the CPU) instead of dequantizing them into an f32 RaggedKvCache (KvForm::F32, the
// path before). On a tiny random-weight GGUF model with D = 64 (so that a row's group parameters
// weigh what they do in real models) and a document of about 1,400 tokens kept at ratio 0.5:
//  - the two paths give the same greedy tokens for every question, first-token logits within
//    1e-3 (they differ by fp32 summation order only), and the compressed state is intact after
//    every answer (the base is never written; the tail is rolled back);
//  - the quantized base holds < 0.2x the f32 cache's K/V bytes (q4: 36 of 256 bytes per row and
//    block; the f16-stored prefix rows are kept in f32);
//  - the reader's raw entry (read_quant_layer) refuses other dtypes, R-KV and cache() refuse a
//    quantized session with Errc::unsupported, and an f32 file still loads as a RaggedKvCache.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.h"
#include "compress/pipeline.h"
#include "loader/loader.h"
#include "tests/support/tiny_gguf.h"
#include "tests/support/tiny_model_dir.h"

using namespace kvzip;

namespace {

test::TinyModelSpec d64_spec() {
  test::TinyModelSpec s;
  s.config = test::tiny_gguf_llama_config();
  s.config.d_model = 256;
  s.config.n_heads = 4;
  s.config.n_kv_heads = 2;  // GQA group 2
  s.config.head_dim = 64;
  s.config.d_ffn = 256;
  s.config.max_context = 2048;
  s.seed = 17;
  return s;
}

std::string document() {
  std::string doc;
  const char* lines[] = {
      "The river town kept its clocks an hour behind the capital, out of spite. ",
      "Every spring the ferryman painted a new number on his boat and forgot the old one. ",
      "Nobody remembered who planted the orchard, but everybody knew the pears were sour. ",
      "A traveling teacher stayed for nine winters and taught the children to count stars. "};
  for (int i = 0; doc.size() < 1300; ++i) doc += lines[i % 4];
  return doc;
}

struct Fixture : test::TinyModelDir {
  Fixture() : TinyModelDir("loaderq", d64_spec(), 2) {}

  std::string compress(format::DType dtype, const std::string& name) const {
    compress::CompressFileOptions o;
    o.compress.method = "kvzip";
    o.compress.ratio = 0.5;
    o.compress.scorer = compress::make_scorer_options(model->chat(), 512, 0);
    o.system = "Be brief.";  // a short prefix: its rows are few, as in real documents
    o.kv.dtype = dtype;
    o.threads = 2;
    const std::string p = path(name);
    compress::compress_to_file(*model, document(), o, p);
    return p;
  }
};

model::GenerateParams greedy(uint32_t n) {
  model::GenerateParams p;
  p.max_tokens = n;
  return p;
}

loader::SessionOptions options(loader::KvForm form) {
  loader::SessionOptions o;
  o.threads = 2;
  o.kv_form = form;
  return o;
}

const char* kQuestions[] = {
    "Who painted the boat?", "What did the teacher teach?",
    "Which fruit was sour, and who planted the orchard near the river town?"};

}  // namespace

TEST_CASE("a q4 file answered through the quantized base gives the dequantized path's tokens",
          "[loader][kvquant-attn]") {
  Fixture f;
  for (format::DType dtype : {format::DType::Q4, format::DType::Q8}) {
    const std::string path = f.compress(dtype, std::string(format::dtype_name(dtype)) + ".kvz");
    loader::QuerySession quant(*f.model, path, options(loader::KvForm::Auto));
    loader::QuerySession plain(*f.model, path, options(loader::KvForm::F32));
    REQUIRE(quant.quantized());
    REQUIRE(!plain.quantized());
    INFO(format::dtype_name(dtype));
    CHECK(quant.base().kept_total() == plain.base().kept_total());
    CHECK(quant.base().base_length() == plain.base().base_length());
    // Memory: the stored rows against the f32 rows of the same cache.
    const double share = double(quant.base().bytes_kept()) / double(plain.base().bytes_kept());
    INFO("quantized base " << quant.base().bytes_kept() << " bytes, f32 "
                           << plain.base().bytes_kept());
    CHECK(share < (dtype == format::DType::Q4 ? 0.2 : 0.32));
    for (int round = 0; round < 2; ++round) {  // twice: the compressed state survives each answer
      for (const char* q : kQuestions) {
        const loader::Answer a = quant.ask(q, greedy(12));
        const loader::Answer b = plain.ask(q, greedy(12));
        INFO(q);
        REQUIRE(a.tokens.size() == 12);
        CHECK(a.tokens == b.tokens);
        REQUIRE(a.first_logits.size() == b.first_logits.size());
        double worst = 0;
        for (size_t i = 0; i < a.first_logits.size(); ++i)
          worst = std::max(worst, double(std::fabs(a.first_logits[i] - b.first_logits[i])));
        CHECK(worst < 1e-3);
      }
    }
  }
}

TEST_CASE("a quantized session refuses what needs f32 rows; f32 files keep the ragged cache",
          "[loader][kvquant-attn]") {
  Fixture f;
  const std::string q4 = f.compress(format::DType::Q4, "q4.kvz");
  const std::string f32 = f.compress(format::DType::F32, "f32.kvz");
  loader::QuerySession s(*f.model, q4, options(loader::KvForm::Auto));
  model::GenerateParams gp = greedy(4);
  gp.rkv = model::RkvParams{};
  gp.rkv->budget = 16;
  try {
    s.ask("Who painted the boat?", gp);
    FAIL("expected Errc::unsupported");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::unsupported);
    CHECK(std::string(e.what()).find("KvForm::F32") != std::string::npos);
  }
  try {
    (void)s.cache();
    FAIL("expected Errc::unsupported");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::unsupported);
  }
  CHECK(s.ask("Who painted the boat?", greedy(4)).tokens.size() == 4);  // still answers
  // The same file in f32, with R-KV, as `kvzip query --rkv-budget` opens it.
  loader::QuerySession r(*f.model, q4, options(loader::KvForm::F32));
  CHECK(r.ask("Who painted the boat?", gp).tokens.size() == 4);
  // f32 files are never quantized, whatever the form asked.
  loader::QuerySession p(*f.model, f32, options(loader::KvForm::Auto));
  CHECK(!p.quantized());
  CHECK(p.cache().kept_total() == s.base().kept_total());
  const format::CacheReader reader = format::CacheReader::open(f32);
  try {
    (void)reader.read_quant_layer(0);
    FAIL("expected Errc::invalid_argument");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::invalid_argument);
  }
  CHECK_THROWS_AS(loader::quant_base_from_reader(reader), Error);
}
