// GGUF -> ModelConfig / Weights / ModelFingerprint: config parsing (llama, qwen2, rope scaling,
// tied/untied, defaults), load_weights round trips for every writable dtype, the Q/K un-permute
// (exact rows, and RoPE attention scores equal to llama.cpp's interleaved RoPE on the raw rows),
// shape and dtype errors, fingerprints, and the real SmolLM2 file ([realmodel]).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "checkpoint/gguf.h"
#include "checkpoint/gguf_weights.h"
#include "common/error.h"
#include "kernels/rope.h"
#include "tests/support/same_config.h"
#include "tests/support/skip.h"
#include "tests/support/tiny_gguf.h"

using namespace kvzip;
using namespace kvzip::test;
using kernels::quant::GgmlType;

namespace {

model::gguf::File open_model(const TinyModel& m) {
  return model::gguf::File::from_bytes(m.bytes, "tiny.gguf");
}

TinyModel make(const ModelConfig& c, GgmlType dtype = GgmlType::F32, uint64_t seed = 1) {
  TinyModelSpec spec;
  spec.config = c;
  spec.dtype = dtype;
  spec.seed = seed;
  return make_tiny_model(spec);
}

void check_same(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  INFO(what);
  REQUIRE(got.size() == want.size());
  size_t diffs = 0;
  for (size_t i = 0; i < got.size(); ++i) diffs += got[i] != want[i];
  CHECK(diffs == 0);
}

void check_same(const model::Matrix& got, const model::Matrix& want, const char* what) {
  check_same(to_f32(got), to_f32(want), what);
}
void check_same(const model::Matrix& got, const std::vector<float>& want, const char* what) {
  check_same(to_f32(got), want, what);
}

// Every tensor of a layer, by name.
using LW = model::LayerWeights;
const std::pair<model::Matrix LW::*, const char*> kLayerMatrices[] = {
    {&LW::wq, "wq"},         {&LW::wk, "wk"},     {&LW::wv, "wv"},        {&LW::wo, "wo"},
    {&LW::w_gate, "w_gate"}, {&LW::w_up, "w_up"}, {&LW::w_down, "w_down"}};
const std::pair<std::vector<float> LW::*, const char*> kLayerVectors[] = {
    {&LW::attn_norm, "attn_norm"},
    {&LW::bq, "bq"},
    {&LW::bk, "bk"},
    {&LW::bv, "bv"},
    {&LW::ffn_norm, "ffn_norm"}};

void check_weights_equal(const model::Weights& a, const model::Weights& b) {
  check_same(a.tok_embd, b.tok_embd, "tok_embd");
  check_same(a.output_norm, b.output_norm, "output_norm");
  check_same(a.output, b.output, "output");
  REQUIRE(a.layers.size() == b.layers.size());
  for (size_t l = 0; l < a.layers.size(); ++l) {
    INFO("layer " << l);
    const model::LayerWeights &x = a.layers[l], &y = b.layers[l];
    for (const auto& [m, name] : kLayerMatrices) check_same(x.*m, y.*m, name);
    for (const auto& [v, name] : kLayerVectors) check_same(x.*v, y.*v, name);
  }
}

template <class Fn>
void expect_error(Fn fn, Errc code, std::vector<std::string> needles) {
  try {
    fn();
    FAIL("no error");
  } catch (const Error& e) {
    INFO("message: " << e.what());
    CHECK(std::string(errc_name(e.code())) == errc_name(code));
    for (const std::string& n : needles) CHECK_THAT(e.what(), Catch::Contains(n));
  }
}

// (rows, cols) row-major times x.
std::vector<float> matvec(const float* w, int64_t rows, int64_t cols, const std::vector<float>& x) {
  std::vector<float> y(size_t(rows), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) s += double(w[r * cols + c]) * x[size_t(c)];
    y[size_t(r)] = float(s);
  }
  return y;
}

// RoPE on one head of D values at `pos`. Pair i rotates by pos * base^(-2i/D); `interleaved`
// pairs (2i, 2i+1) as llama.cpp's normal mode does, otherwise (i, i + D/2) as Hugging Face does.
std::vector<double> rope(const float* x, int D, int pos, float base, bool interleaved) {
  std::vector<double> y(x, x + D);
  for (int i = 0; i < D / 2; ++i) {
    const double th = pos * std::pow(double(base), -2.0 * i / D);
    const int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + D / 2;
    y[a] = x[a] * std::cos(th) - x[b] * std::sin(th);
    y[b] = x[a] * std::sin(th) + x[b] * std::cos(th);
  }
  return y;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

std::vector<float> raw_f32(const model::gguf::File& f, const std::string& name) {
  const model::gguf::TensorInfo& t = f.tensor(name);
  REQUIRE(t.type == GgmlType::F32);
  std::vector<float> v(size_t(t.n_elements()));
  std::memcpy(v.data(), t.data, t.nbytes);
  return v;
}

}  // namespace

TEST_CASE("config_from_gguf reads a tiny llama model's hyper-parameters", "[checkpoint][gguf]") {
  const ModelConfig want = tiny_gguf_llama_config();
  const ModelConfig c = model::config_from_gguf(open_model(make(want)));
  check_same_config(c, want);
  CHECK(c.arch == "llama");
  CHECK(c.vocab_size == kTinyVocabSize);
  CHECK(c.rope_scaling.kind == RopeScalingKind::None);
  CHECK(c.tied_embeddings);
  CHECK_FALSE(c.qkv_bias);
  CHECK(c.group() == 2);
}

TEST_CASE("config_from_gguf sees qwen2's q/k/v biases and an untied output", "[checkpoint][gguf]") {
  const ModelConfig c = model::config_from_gguf(open_model(make(tiny_gguf_qwen2_config())));
  CHECK(c.arch == "qwen2");
  CHECK(c.qkv_bias);
  CHECK_FALSE(c.tied_embeddings);
  CHECK(c.rope_base == 1000000.0f);
  CHECK(c.rms_eps == 1e-6f);
}

TEST_CASE("head_count_kv defaults to head_count and key_length to E / Hq", "[checkpoint][gguf]") {
  TinyModelSpec spec;
  spec.config = tiny_gguf_llama_config();
  spec.drop_keys = {"llama.attention.head_count_kv"};
  const ModelConfig c = model::config_from_gguf(open_model(make_tiny_model(spec)));
  CHECK(c.n_kv_heads == c.n_heads);
  CHECK(c.head_dim == 64 / 4);

  TinyModelSpec wide;
  wide.config = tiny_gguf_llama_config();
  wide.config.head_dim = 32;  // Hq*D = 128 != E: the writer adds attention.key_length
  const TinyModel m = make_tiny_model(wide);
  const model::gguf::File f = open_model(m);
  CHECK(f.get_u32("llama.attention.key_length") == 32);
  CHECK(model::config_from_gguf(f).head_dim == 32);
  check_weights_equal(model::load_weights(f), m.weights);
}

TEST_CASE("llama3 rope scaling is read, with default low/high frequency factors",
          "[checkpoint][gguf]") {
  TinyModelSpec spec;
  spec.config = tiny_gguf_llama_config();
  spec.config.rope_scaling = {RopeScalingKind::Llama3, 8.0f, 2.0f, 8.0f, 8192};
  ModelConfig c = model::config_from_gguf(open_model(make_tiny_model(spec)));
  CHECK(c.rope_scaling.kind == RopeScalingKind::Llama3);
  CHECK(c.rope_scaling.factor == 8.0f);
  CHECK(c.rope_scaling.low_freq_factor == 2.0f);
  CHECK(c.rope_scaling.high_freq_factor == 8.0f);
  CHECK(c.rope_scaling.original_context == 8192);

  spec.drop_keys = {"llama.rope.scaling.low_freq_factor", "llama.rope.scaling.high_freq_factor"};
  c = model::config_from_gguf(open_model(make_tiny_model(spec)));
  CHECK(c.rope_scaling.low_freq_factor == 1.0f);
  CHECK(c.rope_scaling.high_freq_factor == 4.0f);

  spec.drop_keys = {"llama.rope.scaling.original_context_length"};
  expect_error([&] { model::config_from_gguf(open_model(make_tiny_model(spec))); }, Errc::corrupt,
               {"missing key 'llama.rope.scaling.original_context_length'"});
}

TEST_CASE("rope_freqs.weight divisors that no llama3 rule reproduces are applied as they are",
          "[checkpoint][gguf]") {
  TinyModelSpec spec;
  spec.config = tiny_gguf_llama_config();
  TinyModel m = make_tiny_model(spec);
  const uint32_t D = spec.config.head_dim;
  std::vector<float> divisors(D / 2);
  for (uint32_t i = 0; i < D / 2; ++i) divisors[i] = 1.0f + 0.37f * float((i * 5) % 7);  // no rule
  m.writer.tensors.push_back({"rope_freqs.weight",
                              uint32_t(GgmlType::F32),
                              {uint64_t(D / 2)},
                              quantize_row(GgmlType::F32, divisors.data(), D / 2),
                              std::nullopt});
  const ModelConfig c =
      model::config_from_gguf(model::gguf::File::from_bytes(m.writer.build().bytes));
  CHECK(c.rope_scaling.kind == RopeScalingKind::None);
  CHECK(c.rope_scaling.freq_factors == divisors);
  const std::vector<float> plain = kernels::rope_inv_freq(D, c.rope_base, RopeScaling{});
  const std::vector<float> got = kernels::rope_inv_freq(D, c.rope_base, c.rope_scaling);
  for (uint32_t i = 0; i < D / 2; ++i)
    CHECK(got[i] == Approx(plain[i] / divisors[i]).epsilon(1e-6));

  // Both descriptions at once, or a table of the wrong length, are refused.
  TinyModelSpec both = spec;
  both.config.rope_scaling = {RopeScalingKind::Llama3, 8.0f, 1.0f, 4.0f, 64};
  TinyModel m2 = make_tiny_model(both);
  m2.writer.tensors.push_back(m.writer.tensors.back());
  expect_error(
      [&] { model::config_from_gguf(model::gguf::File::from_bytes(m2.writer.build().bytes)); },
      Errc::corrupt, {"rope_freqs.weight", "same scaling"});
  m.writer.tensors.back().ne = {uint64_t(D / 2 - 2)};
  m.writer.tensors.back().data.resize(size_t(D / 2 - 2) * 4);
  expect_error(
      [&] { model::config_from_gguf(model::gguf::File::from_bytes(m.writer.build().bytes)); },
      Errc::corrupt, {"rope_freqs.weight", "head_dim / 2"});
}

TEST_CASE("linear rope scaling is read and unknown scaling types are unsupported",
          "[checkpoint][gguf]") {
  TinyModelSpec spec;
  spec.config = tiny_gguf_llama_config();
  spec.config.rope_scaling.kind = RopeScalingKind::Linear;
  spec.config.rope_scaling.factor = 4.0f;
  const ModelConfig c = model::config_from_gguf(open_model(make_tiny_model(spec)));
  CHECK(c.rope_scaling.kind == RopeScalingKind::Linear);
  CHECK(c.rope_scaling.factor == 4.0f);

  spec.extra_kvs = {kv_string("llama.rope.scaling.type", "yarn")};
  expect_error([&] { model::config_from_gguf(open_model(make_tiny_model(spec))); },
               Errc::unsupported, {"rope.scaling.type", "yarn"});
}

TEST_CASE("unknown architectures and missing required keys are refused", "[checkpoint][gguf]") {
  TinyModelSpec spec;
  spec.config = tiny_gguf_llama_config();
  spec.extra_kvs = {kv_string("general.architecture", "gpt2")};
  expect_error([&] { model::config_from_gguf(open_model(make_tiny_model(spec))); },
               Errc::unsupported, {"architecture 'gpt2'"});
  spec.extra_kvs.clear();
  spec.drop_keys = {"llama.block_count"};
  expect_error([&] { model::config_from_gguf(open_model(make_tiny_model(spec))); }, Errc::corrupt,
               {"missing key 'llama.block_count'"});
  spec.drop_keys.clear();
  spec.extra_kvs = {kv_u32("llama.attention.head_count_kv", 3)};
  expect_error([&] { model::config_from_gguf(open_model(make_tiny_model(spec))); }, Errc::corrupt,
               {"head_count 4", "head_count_kv 3"});
  spec.extra_kvs = {kv_u32("llama.rope.dimension_count", 8)};
  expect_error([&] { model::config_from_gguf(open_model(make_tiny_model(spec))); },
               Errc::unsupported, {"rope.dimension_count 8"});
}

TEST_CASE("load_weights round-trips every dtype the test writer produces", "[checkpoint][gguf]") {
  const GgmlType dtype = GENERATE(GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0,
                                  GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1);
  const bool qwen = GENERATE(false, true);
  INFO(kernels::quant::type_name(dtype) << (qwen ? " qwen2" : " llama"));
  const TinyModel m = make(qwen ? tiny_gguf_qwen2_config() : tiny_gguf_llama_config(), dtype, 7);
  const model::gguf::File f = open_model(m);
  const model::Weights w = model::load_weights(f);
  CHECK(w.config.arch == m.weights.config.arch);
  CHECK(w.config.tied_embeddings == m.weights.config.tied_embeddings);
  check_weights_equal(w, m.weights);
  CHECK(&w.lm_head() == (qwen ? &w.output : &w.tok_embd));
  CHECK(w.layers[0].wq.type == dtype);  // kept as stored, not expanded
}

TEST_CASE("a SmolLM2-like mix of Q4_1 weights and a Q8_0 embedding round-trips",
          "[checkpoint][gguf]") {
  TinyModelSpec spec;
  spec.config = tiny_gguf_llama_config();
  spec.dtype = GgmlType::Q4_1;
  spec.embd_dtype = GgmlType::Q8_0;
  const TinyModel m = make_tiny_model(spec);
  const model::gguf::File f = open_model(m);
  CHECK(f.tensor("token_embd.weight").type == GgmlType::Q8_0);
  CHECK(f.tensor("blk.0.attn_q.weight").type == GgmlType::Q4_1);
  CHECK(f.tensor("blk.0.attn_norm.weight").type == GgmlType::F32);
  check_weights_equal(model::load_weights(f), m.weights);
  check_weights_equal(model::load_weights(f), m.weights);
}

TEST_CASE("llama Q/K rows are un-permuted: HF row i is GGUF row 2i, row i+D/2 is GGUF 2i+1",
          "[checkpoint][gguf]") {
  ModelConfig cfg = tiny_gguf_llama_config();
  cfg.qkv_bias = true;  // a llama with biases: they are permuted too
  const TinyModel m = make(cfg);
  const model::gguf::File f = open_model(m);
  const model::Weights w = model::load_weights(f);
  const int64_t E = cfg.d_model, D = cfg.head_dim;
  for (const char* which : {"q", "k"}) {
    const bool q = which[0] == 'q';
    const int64_t heads = q ? cfg.n_heads : cfg.n_kv_heads;
    const std::string b = std::string("blk.1.attn_") + which;
    const auto raw = raw_f32(f, b + ".weight");
    const auto raw_bias = raw_f32(f, b + ".bias");
    const std::vector<float> wl = to_f32(q ? w.layers[1].wq : w.layers[1].wk);
    const auto& bl = q ? w.layers[1].bq : w.layers[1].bk;
    int mismatches = 0;
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < D / 2; ++i) {
        for (int p = 0; p < 2; ++p) {
          const int64_t hf = h * D + p * (D / 2) + i, gg = h * D + 2 * i + p;
          mismatches += std::memcmp(&wl[size_t(hf * E)], &raw[size_t(gg * E)], size_t(E) * 4) != 0;
          mismatches += bl[size_t(hf)] != raw_bias[size_t(gg)];
        }
      }
    }
    INFO(which);
    CHECK(mismatches == 0);
  }
  check_weights_equal(w, m.weights);
  // V is not permuted.
  check_same(w.layers[1].wv, raw_f32(f, "blk.1.attn_v.weight"), "wv");
}

TEST_CASE("half-split RoPE on loaded Q/K gives llama.cpp's interleaved-RoPE scores",
          "[checkpoint][gguf]") {
  const ModelConfig cfg = tiny_gguf_llama_config();
  const TinyModel m = make(cfg, GgmlType::F32, 3);
  const model::gguf::File f = open_model(m);
  const model::Weights w = model::load_weights(f);
  const int64_t E = cfg.d_model, D = cfg.head_dim;
  std::vector<float> x(static_cast<size_t>(E)), y(static_cast<size_t>(E));
  for (int64_t i = 0; i < E; ++i)
    x[size_t(i)] = std::sin(0.3f * i), y[size_t(i)] = std::cos(0.7f * i);
  const auto raw_q = raw_f32(f, "blk.0.attn_q.weight"), raw_k = raw_f32(f, "blk.0.attn_k.weight");
  const auto qg = matvec(raw_q.data(), cfg.n_heads * D, E, x);
  const auto kg = matvec(raw_k.data(), cfg.n_kv_heads * D, E, y);
  const std::vector<float> wq = to_f32(w.layers[0].wq), wk = to_f32(w.layers[0].wk);
  const auto qh = matvec(wq.data(), cfg.n_heads * D, E, x);
  const auto kh = matvec(wk.data(), cfg.n_kv_heads * D, E, y);
  double worst = 0, neox_on_gguf_gap = 0;
  for (uint32_t h = 0; h < cfg.n_heads; ++h) {
    const uint32_t kvh = h / cfg.group();
    for (int pos_q : {0, 5, 40}) {
      for (int pos_k : {0, 3, 40}) {
        const double ref = dot(rope(&qg[h * D], int(D), pos_q, cfg.rope_base, true),
                               rope(&kg[kvh * D], int(D), pos_k, cfg.rope_base, true));
        const double ours = dot(rope(&qh[h * D], int(D), pos_q, cfg.rope_base, false),
                                rope(&kh[kvh * D], int(D), pos_k, cfg.rope_base, false));
        const double wrong = dot(rope(&qg[h * D], int(D), pos_q, cfg.rope_base, false),
                                 rope(&kg[kvh * D], int(D), pos_k, cfg.rope_base, false));
        worst = std::max(worst, std::fabs(ours - ref) / (1.0 + std::fabs(ref)));
        neox_on_gguf_gap = std::max(neox_on_gguf_gap, std::fabs(wrong - ref));
      }
    }
  }
  CHECK(worst < 1e-5);
  // Control: half-split RoPE on the still-permuted rows is measurably wrong, so the check above
  // can tell a missing un-permute from a correct one.
  CHECK(neox_on_gguf_gap > 1e-2);
}

TEST_CASE("qwen2 Q/K rows and biases are loaded unpermuted", "[checkpoint][gguf]") {
  const TinyModel m = make(tiny_gguf_qwen2_config());
  const model::gguf::File f = open_model(m);
  const model::Weights w = model::load_weights(f);
  check_same(w.layers[0].wq, raw_f32(f, "blk.0.attn_q.weight"), "wq");
  check_same(w.layers[0].wk, raw_f32(f, "blk.0.attn_k.weight"), "wk");
  check_same(w.layers[0].bq, raw_f32(f, "blk.0.attn_q.bias"), "bq");
  check_same(w.layers[0].bk, raw_f32(f, "blk.0.attn_k.bias"), "bk");
  CHECK_FALSE(model::gguf_qk_permuted("qwen2"));
  CHECK(model::gguf_qk_permuted("llama"));
}

TEST_CASE("a tensor of the wrong shape is named with found and expected shapes",
          "[checkpoint][gguf]") {
  TinyModel m = make(tiny_gguf_llama_config());
  for (GgufTensor& t : m.writer.tensors) {
    if (t.name == "blk.1.attn_k.weight") {
      t.ne = {64, 16};
      t.data.resize(64 * 16 * 4);
    }
  }
  const model::gguf::File f = model::gguf::File::from_bytes(m.writer.build().bytes, "tiny.gguf");
  expect_error([&] { model::load_weights(f); }, Errc::corrupt,
               {"tensor 'blk.1.attn_k.weight'", "[64, 16]", "expected [64, 32]"});
}

TEST_CASE("a missing tensor and an undecodable tensor type are reported by name",
          "[checkpoint][gguf]") {
  TinyModel m = make(tiny_gguf_llama_config());
  GgufWriter without = m.writer;
  auto& ts = without.tensors;
  ts.erase(std::remove_if(ts.begin(), ts.end(),
                          [](const GgufTensor& t) { return t.name == "blk.1.ffn_up.weight"; }),
           ts.end());
  expect_error([&] { model::load_weights(model::gguf::File::from_bytes(without.build().bytes)); },
               Errc::corrupt, {"missing tensor 'blk.1.ffn_up.weight'"});
  for (GgufTensor& t : m.writer.tensors) {
    if (t.name == "blk.0.ffn_down.weight") {  // ne [96, 64]: 3 IQ4_NL blocks of 18 B per row
      t.type = uint32_t(GgmlType::IQ4_NL);
      t.data.assign(3 * 18 * 64, 0);
    }
  }
  expect_error([&] { model::load_weights(model::gguf::File::from_bytes(m.writer.build().bytes)); },
               Errc::unsupported, {"tensor 'blk.0.ffn_down.weight'", "IQ4_NL"});
}

TEST_CASE("fingerprints separate weights, tokenizer and name", "[checkpoint][gguf]") {
  TinyModelSpec spec;
  spec.config = tiny_gguf_llama_config();
  const ModelFingerprint a = model::fingerprint_from_gguf(open_model(make_tiny_model(spec)));
  const ModelFingerprint a2 = model::fingerprint_from_gguf(open_model(make_tiny_model(spec)));
  CHECK(a.arch == "llama");
  CHECK(a.name == "tiny-test-model");
  CHECK(a.same_model(a2));
  CHECK(a.weights_hash == a2.weights_hash);

  spec.seed = 2;  // other weights, same tokenizer
  const ModelFingerprint b = model::fingerprint_from_gguf(open_model(make_tiny_model(spec)));
  CHECK(b.weights_hash != a.weights_hash);
  CHECK(b.tokenizer_hash == a.tokenizer_hash);
  CHECK_FALSE(a.same_model(b));

  spec.seed = 1;
  TinyVocab v = tiny_vocab();
  std::swap(v.merges[0], v.merges[1]);  // same merges, other priority
  spec.extra_kvs = {kv_string_array("tokenizer.ggml.merges", v.merges)};
  const ModelFingerprint c = model::fingerprint_from_gguf(open_model(make_tiny_model(spec)));
  CHECK(c.tokenizer_hash != a.tokenizer_hash);
  CHECK(c.weights_hash == a.weights_hash);

  spec.extra_kvs = {kv_string("general.name", "renamed")};
  const ModelFingerprint d = model::fingerprint_from_gguf(open_model(make_tiny_model(spec)));
  CHECK(d.name == "renamed");
  CHECK(d.same_model(a));
}

TEST_CASE("the real SmolLM2-135M-Instruct GGUF loads with the expected config",
          "[checkpoint][gguf][realmodel]") {
  KVZIP_REAL_MODEL_PATH_OR_SKIP(model);
  const char* env = model.c_str();
  const model::gguf::File f = model::gguf::File::open(env);
  const ModelConfig c = model::config_from_gguf(f);
  CHECK(c.arch == "llama");
  CHECK(c.n_layers == 30);
  CHECK(c.d_model == 576);
  CHECK(c.n_heads == 9);
  CHECK(c.n_kv_heads == 3);
  CHECK(c.head_dim == 64);
  CHECK(c.d_ffn == 1536);
  CHECK(c.vocab_size == 49152);
  CHECK(c.rope_base == 100000.0f);
  CHECK(c.rms_eps == 1e-5f);
  CHECK(c.max_context == 8192);
  CHECK(c.tied_embeddings);
  CHECK_FALSE(c.qkv_bias);
  CHECK(c.rope_scaling.kind == RopeScalingKind::None);
  CHECK(f.tensors().size() == 272);
  CHECK(f.tensor("token_embd.weight").type == GgmlType::Q8_0);
  CHECK(f.tensor("blk.0.attn_q.weight").type == GgmlType::Q4_1);
  CHECK(f.tensor("blk.29.ffn_down.weight").type == GgmlType::Q4_1);
  CHECK(f.tensor("output_norm.weight").type == GgmlType::F32);
  for (const model::gguf::TensorInfo& t : f.tensors()) {
    INFO(t.name);
    CHECK((t.type == GgmlType::Q4_1 || t.type == GgmlType::Q8_0 || t.type == GgmlType::F32));
  }
  CHECK(f.get_string("tokenizer.ggml.model") == "gpt2");
  CHECK(f.get_string("tokenizer.ggml.pre") == "smollm");
  CHECK(f.get_string("tokenizer.chat_template") == kChatMlTemplate);
  CHECK(f.array_size("tokenizer.ggml.merges") == 48900);
  const model::Weights w = model::load_weights(f);
  REQUIRE(w.layers.size() == 30);
  CHECK(size_t(w.tok_embd.rows) * w.tok_embd.cols == size_t(49152) * 576);
  CHECK(w.tok_embd.type == GgmlType::Q8_0);  // as stored: the file is mapped, not expanded
  CHECK(w.output.empty());
  CHECK(size_t(w.layers[29].wk.rows) * w.layers[29].wk.cols == size_t(192) * 576);
  const std::vector<float> wq3 = to_f32(w.layers[3].wq), wk3 = to_f32(w.layers[3].wk);
  const std::vector<float> embd = to_f32(w.tok_embd);
  // Golden values from an independent decoder: gguf-py's quants.dequantize, with the llama.cpp
  // permutation undone in numpy (reshape(heads, D/2, 2, E) -> swap axes 1, 2).
  auto row3 = [&](const std::vector<float>& m, size_t row) {
    return std::vector<float>(m.begin() + long(row * 576), m.begin() + long(row * 576 + 3));
  };
  CHECK(row3(wq3, 0) == std::vector<float>{0x1.3f2p-4f, 0x1.38fp-3f, -0x1.bfcp-4f});
  CHECK(row3(wq3, 32) == std::vector<float>{0x1.6ep-5f, -0x1.dcp-9f, 0x1.6ep-5f});
  CHECK(row3(wq3, 100) == std::vector<float>{0x1.53p-6f, 0x1.719p-3f, 0x1.fff8p-2f});
  CHECK(row3(wk3, 33) == std::vector<float>{0x1.168p-5f, -0x1.862p-3f, -0x1.408p-4f});
  CHECK(row3(embd, 19556) == std::vector<float>{-0x1.a3ap-5f, 0x1.466p-5f, 0.0f});
  double wq_sum = 0, embd_sum = 0;
  for (float v : wq3) wq_sum += v;
  for (float v : embd) embd_sum += v;
  CHECK(wq_sum == Approx(-96.36239624023438).epsilon(1e-9));
  CHECK(embd_sum == Approx(-15353.04449415207).epsilon(1e-9));
  float norm_sum = 0;
  for (float v : w.output_norm) norm_sum += v;
  CHECK(std::isfinite(norm_sum));
  CHECK(norm_sum != 0.0f);
  const ModelFingerprint fp = model::fingerprint_from_gguf(f);
  CHECK(fp.arch == "llama");
  CHECK(fp.weights_hash != 0);
  CHECK(fp.same_model(model::fingerprint_from_gguf(model::gguf::File::open(env))));
}
