// Hugging Face checkpoints against transformers (tests/golden/hf,
// scripts/golden/make_hf_fixtures.py): tiny random LlamaForCausalLM (bf16, llama3 rope scaling,
// untied, llama-bpe tokenizer; its GGUF has the scaling only as llama.cpp's rope_freqs.weight),
// Qwen2ForCausalLM (f32, q/k/v biases, sharded, qwen2 tokenizer) and MistralForCausalLM (f16,
// head_dim != hidden/heads, tied, sliding window) folders and their GGUF conversions (written by
// the `gguf` package with llama.cpp's Q/K interleave). For each: kvzip's token ids equal
// transformers', its logits match transformers' float64 logits at every position, from the folder
// and from the GGUF (exact path: max|Δ|/max|ref| <= 1e-4, measured 1.26e-6 to 1.40e-6; fast path
// and token-by-token decode <= 2e-2, room for reduced-precision kernels, measured the same as exact
// today), and the KV cache and the compressed cache computed from the folder equal those from the
// GGUF bit for bit, while the fingerprints keep a cache of one from loading with the other.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "common/error.h"
#include "compress/pipeline.h"
#include "format/format.h"
#include "loader/loader.h"
#include "model/forward.h"
#include "model/model.h"
#include "tests/support/hf_fixture.h"
#include "tests/support/same_config.h"

using namespace kvzip;

namespace {

struct LogitCase {
  std::string text;
  bool add_special = false;
  std::vector<int32_t> ids;
  std::vector<float> logits;  // (T, V)
};

// Reads <name>.logits.bin (KVZHFLOG v1, layout in make_hf_fixtures.py); every read is checked.
std::vector<LogitCase> read_golden(const std::string& name, uint32_t vocab) {
  const std::vector<uint8_t> b = test::read_file_bytes(test::hf_golden(name + ".logits.bin"));
  size_t o = 0;
  auto need = [&](size_t n) {
    if (b.size() - o < n) FAIL(name << ".logits.bin is truncated at byte " << o);
  };
  auto u32 = [&]() {
    need(4);
    uint32_t v;
    std::memcpy(&v, b.data() + o, 4);
    o += 4;
    return v;
  };
  need(8);
  REQUIRE(std::memcmp(b.data(), "KVZHFLOG", 8) == 0);
  o = 8;
  REQUIRE(u32() == 1);
  REQUIRE(u32() == vocab);
  std::vector<LogitCase> cases(u32());
  for (LogitCase& c : cases) {
    const uint32_t n = u32();
    need(n);
    c.text.assign(reinterpret_cast<const char*>(b.data() + o), n);
    o += n;
    c.add_special = u32() != 0;
    const uint32_t T = u32();
    need(size_t(T) * 4);
    c.ids.resize(T);
    std::memcpy(c.ids.data(), b.data() + o, size_t(T) * 4);
    o += size_t(T) * 4;
    need(size_t(T) * vocab * 4);
    c.logits.resize(size_t(T) * vocab);
    std::memcpy(c.logits.data(), b.data() + o, c.logits.size() * 4);
    o += c.logits.size() * 4;
  }
  REQUIRE(o == b.size());
  return cases;
}

// max |got - ref| / max |ref| over all positions.
double rel_err(const std::vector<float>& got, const std::vector<float>& ref) {
  REQUIRE(got.size() == ref.size());
  double d = 0, m = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    d = std::max(d, std::abs(double(got[i]) - ref[i]));
    m = std::max(m, std::abs(double(ref[i])));
  }
  return d / m;
}

std::vector<int32_t> kvzip_ids(const model::Model& m, const LogitCase& c) {
  std::vector<int32_t> ids;
  if (c.add_special && m.tokenizer().add_bos()) ids.push_back(m.tokenizer().bos());
  const std::vector<int32_t> body = m.tokenizer().encode(c.text, /*parse_special=*/true);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

model::ForwardOptions one_thread(kernels::MatmulPath path = kernels::MatmulPath::Fast) {
  model::ForwardOptions o;
  o.threads = 1;
  o.matmul = path;
  return o;
}

std::vector<float> all_logits(const model::Model& m, const std::vector<int32_t>& ids,
                              kernels::MatmulPath path) {
  model::Forward fwd(m.weights(), one_thread(path));
  model::KvCache cache(m.config());
  return fwd.prefill(cache, ids, model::LogitsMode::All);
}

// Every check against transformers for one loaded model (folder or GGUF form).
void check_against_transformers(const model::Model& m, const std::string& name, const char* form) {
  const std::vector<LogitCase> cases = read_golden(name, m.config().vocab_size);
  double worst_exact = 0, worst_fast = 0;
  for (const LogitCase& c : cases) {
    INFO(name << " (" << form << ") text: " << c.text);
    CHECK(kvzip_ids(m, c) == c.ids);
    worst_exact =
        std::max(worst_exact, rel_err(all_logits(m, c.ids, kernels::MatmulPath::Exact), c.logits));
    worst_fast =
        std::max(worst_fast, rel_err(all_logits(m, c.ids, kernels::MatmulPath::Fast), c.logits));
  }
  // Decode (one token at a time, the GEMV path) on the first case.
  {
    const LogitCase& c = cases[0];
    model::Forward fwd(m.weights(), one_thread());
    model::KvCache cache(m.config());
    std::vector<float> got;
    for (int32_t id : c.ids) {
      std::vector<float> l = fwd.decode(cache, id);
      got.insert(got.end(), l.begin(), l.end());
    }
    CHECK(rel_err(got, c.logits) <= 2e-2);
  }
  INFO(name << " (" << form << "): max|Δlogit|/max|ref| exact " << worst_exact << ", fast "
            << worst_fast);
  CHECK(worst_exact <= 1e-4);
  CHECK(worst_fast <= 2e-2);
}

struct Pair {
  std::unique_ptr<model::Model> folder, gguf;
  explicit Pair(const std::string& name)
      : folder(model::Model::load(test::hf_golden(name))),
        gguf(model::Model::load(test::hf_golden(name + ".gguf"))) {}
};

void check_same_rows(const model::AttentionCache& a, const model::AttentionCache& b) {
  REQUIRE(a.shape() == b.shape());
  REQUIRE(a.logical_length() == b.logical_length());
  const model::CacheShape s = a.shape();
  size_t differing = 0;
  for (uint32_t l = 0; l < s.n_layers; ++l)
    for (uint32_t h = 0; h < s.n_kv_heads; ++h) {
      const model::KvHeadView x = a.view(l, h), y = b.view(l, h);
      REQUIRE(x.len == y.len);
      CHECK(std::equal(x.positions, x.positions + x.len, y.positions));
      const size_t n = size_t(x.len) * s.head_dim;
      differing += std::memcmp(x.k, y.k, n * 4) != 0;
      differing += std::memcmp(x.v, y.v, n * 4) != 0;
    }
  CHECK(differing == 0);
}

const char* kDoc =
    "The Normans were the people who gave their name to Normandy, a region in France. "
    "The capital of France is Paris; the Seine flows through it for 777 km.";

}  // namespace

TEST_CASE("hf golden: Llama 3 folder (bf16, llama3 rope scaling, untied) matches transformers",
          "[model][hf]") {
  Pair p("llama3");
  const ModelConfig& c = p.folder->config();
  CHECK(c.arch == "llama");
  CHECK(c.rope_scaling.kind == RopeScalingKind::Llama3);
  CHECK(c.rope_scaling.factor == 4.0f);
  CHECK(c.rope_scaling.high_freq_factor == 8.0f);
  CHECK(c.rope_scaling.original_context == 100);
  CHECK(c.rope_base == 10000.0f);
  REQUIRE(p.gguf->config().rope_scaling.kind == RopeScalingKind::Llama3);  // from rope_freqs.weight
  CHECK_FALSE(c.tied_embeddings);
  CHECK(p.folder->weights().output.type == kernels::quant::GgmlType::BF16);
  CHECK(p.folder->weights().layers[0].wq.row_map.empty());  // HF rows are canonical
  for (const model::LayerWeights& l :
       p.folder->weights().layers)  // used in place in the mapped files
    for (const model::Matrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
      CHECK(m->owned == nullptr);
  CHECK_FALSE(p.gguf->weights().layers[0].wq.row_map.empty());
  CHECK(p.folder->tokenizer().pre() == "llama-bpe");
  CHECK(p.folder->tokenizer().add_bos());  // from the post-processor template
  CHECK(p.folder->chat().format() == model::ChatFormat::Llama3);  // chat_template.jinja
  test::check_same_config(c, p.gguf->config(), true);
  check_against_transformers(*p.folder, "llama3", "folder");
  check_against_transformers(*p.gguf, "llama3", "gguf");
}

TEST_CASE("hf golden: Qwen2 folder (f32, q/k/v bias, sharded) matches transformers",
          "[model][hf]") {
  Pair p("qwen2");
  const ModelConfig& c = p.folder->config();
  CHECK(c.arch == "qwen2");
  CHECK(c.qkv_bias);
  CHECK(c.rope_base == 1000000.0f);  // from transformers 5's rope_parameters
  CHECK(p.folder->weights().layers[1].bk.size() == c.n_kv_heads * c.head_dim);
  CHECK(p.folder->tokenizer().pre() == "qwen2");
  CHECK_FALSE(p.folder->tokenizer().add_bos());
  CHECK(p.folder->tokenizer().token_type(int32_t(c.vocab_size) - 1) ==
        model::TokenType::Unused);  // padding
  CHECK(p.folder->chat().format() == model::ChatFormat::ChatMl);
  test::check_same_config(c, p.gguf->config(), true);
  check_against_transformers(*p.folder, "qwen2", "folder");
  check_against_transformers(*p.gguf, "qwen2", "gguf");
}

TEST_CASE("hf golden: Mistral folder (f16, head_dim 32, tied, sliding window) matches transformers",
          "[model][hf]") {
  Pair p("mistral");
  const ModelConfig& c = p.folder->config();
  CHECK(c.arch == "mistral");
  CHECK(c.head_dim == 32);
  CHECK(c.head_dim * c.n_heads != c.d_model);
  CHECK(c.tied_embeddings);
  CHECK(c.max_context == 1024);  // capped at sliding_window: within it attention is full
  CHECK(p.folder->tokenizer().pre() == "gpt2");
  const int32_t tool = p.folder->tokenizer().token_id("<tool>");
  REQUIRE(tool >= 0);
  CHECK(p.folder->tokenizer().token_type(tool) == model::TokenType::UserDefined);
  test::check_same_config(c, p.gguf->config(), false);
  check_against_transformers(*p.folder, "mistral", "folder");
  check_against_transformers(*p.gguf, "mistral", "gguf");
}

TEST_CASE(
    "hf golden: Gemma 3 folder (sliding-window and global layers, QK-norm, GeGLU) matches "
    "transformers",
    "[model][hf][gemma3]") {
  Pair p("gemma3");
  const ModelConfig& c = p.folder->config();
  CHECK(c.arch == "gemma3");
  CHECK(c.qk_norm);
  CHECK(c.post_norms);
  CHECK(c.ffn_act == FfnActivation::GeluTanh);
  CHECK(c.tied_embeddings);
  CHECK(c.sliding_window == 8);  // every case is longer, so the window cuts in
  CHECK(c.local_layers == std::vector<uint8_t>{1, 1, 1, 1, 1, 0});
  CHECK(c.rope_base == 1e6f);
  CHECK(c.rope_local_base == 1e4f);
  CHECK(c.max_context == 512);  // not capped: the local layers run their window
  CHECK(p.folder->chat().format() == model::ChatFormat::Gemma);
  test::check_same_config(c, p.gguf->config(), true);
  check_against_transformers(*p.folder, "gemma3", "folder");
  check_against_transformers(*p.gguf, "gemma3", "gguf");
}

TEST_CASE("hf golden: Qwen 3 folder (bf16, QK-norm, no biases) matches transformers",
          "[model][hf][qwen3]") {
  Pair p("qwen3");
  const ModelConfig& c = p.folder->config();
  CHECK(c.arch == "qwen3");
  CHECK(c.qk_norm);
  CHECK_FALSE(c.qkv_bias);
  CHECK_FALSE(c.hybrid());
  test::check_same_config(c, p.gguf->config(), true);
  check_against_transformers(*p.folder, "qwen3", "folder");
  check_against_transformers(*p.gguf, "qwen3", "gguf");
}

TEST_CASE("hf golden: caches from a folder equal those from its GGUF conversion", "[model][hf]") {
  for (const char* name : {"llama3", "qwen2", "mistral", "qwen3"}) {
    INFO(name);
    Pair p(name);
    // Same tokenizer data in both forms, different weight bytes (GGUF Q/K rows are interleaved).
    CHECK(p.folder->fingerprint().arch == p.gguf->fingerprint().arch);
    CHECK(p.folder->fingerprint().tokenizer_hash == p.gguf->fingerprint().tokenizer_hash);
    CHECK(p.folder->fingerprint().weights_hash != p.gguf->fingerprint().weights_hash);

    const std::vector<int32_t> prefix = p.folder->chat().prefix("");
    const std::vector<int32_t> doc = p.folder->chat().encode_document(kDoc);
    REQUIRE(prefix == p.gguf->chat().prefix(""));
    REQUIRE(doc == p.gguf->chat().encode_document(kDoc));
    std::vector<int32_t> all = prefix;
    all.insert(all.end(), doc.begin(), doc.end());
    for (kernels::MatmulPath path : {kernels::MatmulPath::Exact, kernels::MatmulPath::Fast}) {
      model::Forward ff(p.folder->weights(), one_thread(path)),
          fg(p.gguf->weights(), one_thread(path));
      model::KvCache cf(p.folder->config()), cg(p.gguf->config());
      ff.prefill(cf, all, model::LogitsMode::None);
      fg.prefill(cg, all, model::LogitsMode::None);
      check_same_rows(cf, cg);

      compress::CompressOptions co;
      co.ratio = 0.5;
      co.prefill.answer_room = 16;  // keeps the test short; the fixtures allow 1024+ tokens
      co.scorer.prompts = compress::reconstruction_prompts(p.folder->chat());
      REQUIRE(co.scorer.prompts.first == compress::reconstruction_prompts(p.gguf->chat()).first);
      compress::CompressResult rf = compress::compress(ff, prefix, doc, co),
                               rg = compress::compress(fg, prefix, doc, co);
      check_same_rows(rf.cache, rg.cache);
      CHECK(rf.kept_scores == rg.kept_scores);
    }
  }
}

TEST_CASE("hf golden: a cache file from a folder is refused by its GGUF conversion",
          "[model][hf]") {
  Pair p("llama3");
  compress::CacheDescription d;
  d.prefix = p.folder->chat().prefix("");
  d.document = p.folder->chat().encode_document(kDoc);
  d.suffix = p.folder->chat().suffix("");
  d.document_text = kDoc;
  model::Forward fwd(p.folder->weights(), one_thread());
  compress::CompressOptions co;
  co.ratio = 0.5;
  co.prefill.answer_room = 16;  // keeps the test short; the fixtures allow 1024+ tokens
  co.scorer.prompts = compress::reconstruction_prompts(p.folder->chat());
  compress::CompressResult r = compress::compress(fwd, d.prefix, d.document, co);
  test::HfCopy tmp("llama3");  // a scratch folder for the .kvz
  const std::string path = tmp.path("c.kvz");
  format::write_cache_file(compress::make_contents(*p.folder, r.cache, r.kept_scores, d), path);
  CHECK_NOTHROW(loader::QuerySession(*p.folder, path));
  try {
    loader::QuerySession s(*p.gguf, path);
    FAIL("the GGUF model loaded the folder's cache");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::model_mismatch);
  }
}

TEST_CASE("a GGUF's weights read into memory give the mapped file's logits bit for bit",
          "[model][hf]") {
  model::LoadOptions mem, map;
  mem.weights = model::LoadOptions::Weights::Memory;
  map.weights = model::LoadOptions::Weights::Map;
  const auto a = model::Model::load(test::hf_golden("llama3.gguf"), mem);
  const auto b = model::Model::load(test::hf_golden("llama3.gguf"), map);
  CHECK(a->weights_in_memory());
  CHECK_FALSE(b->weights_in_memory());
  CHECK(a->fingerprint().same_model(b->fingerprint()));
  const std::vector<int32_t> ids = a->tokenizer().encode(kDoc, /*parse_special=*/false);
  const std::vector<float> la = all_logits(*a, ids, kernels::MatmulPath::Fast);
  const std::vector<float> lb = all_logits(*b, ids, kernels::MatmulPath::Fast);
  REQUIRE(la.size() == lb.size());
  CHECK(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)) == 0);
}
