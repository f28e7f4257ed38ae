// The quantized GEMV (kernels/qgemv.h) against the plain reference: random blocks of every format
// are dequantized by model/quant.cc (the loader's own decoder, an independent oracle) and
// multiplied in double by ref::gemm; every ISA this CPU has must agree within fp32 rounding.
// Then the model side: a tiny Q4_1 GGUF keeps its blocks in canonical row order, and the fast
// path's logits (8-bit activations) stay near the exact path's.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "cache/kv_cache.h"
#include "checkpoint/gguf_weights.h"
#include "common/error.h"
#include "common/half.h"
#include "kernels/qgemv.h"
#include "kernels/quant.h"
#include "kernels/thread_pool.h"
#include "model/forward.h"
#include "tests/support/random_weights.h"
#include "tests/support/reference.h"
#include "tests/support/tiny_gguf.h"

using namespace kvzip;

namespace {

kernels::quant::GgmlType ggml_type(kernels::QFormat f) {
  switch (f) {
    case kernels::QFormat::Q4_0: return kernels::quant::GgmlType::Q4_0;
    case kernels::QFormat::Q4_1: return kernels::quant::GgmlType::Q4_1;
    case kernels::QFormat::Q8_0: return kernels::quant::GgmlType::Q8_0;
  }
  return kernels::quant::GgmlType::F32;
}

void put_half(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  p[0] = uint8_t(h & 0xFF);
  p[1] = uint8_t(h >> 8);
}

// A random (out, in) matrix in format f: every quant byte uniform (all nibble and int8 values),
// scales in ±[0.002, 0.1), Q4_1 minimums in ±0.1; signs of scales mixed.
std::vector<uint8_t> random_blocks(kernels::QFormat f, uint32_t out, uint32_t in, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const size_t bb = kernels::qblock_bytes(f), nb = size_t(out) * (in / kernels::kQBlockElems);
  std::vector<uint8_t> w(nb * bb);
  auto uniform = [&](float lo, float hi) {
    return lo + (hi - lo) * float(rng() >> 40) / 16777216.0f;
  };
  for (size_t b = 0; b < nb; ++b) {
    uint8_t* blk = w.data() + b * bb;
    for (size_t i = 0; i < bb; ++i) blk[i] = uint8_t(rng());
    const float d = uniform(0.002f, 0.1f) * (rng() & 1 ? 1.0f : -1.0f);
    put_half(blk, d);
    if (f == kernels::QFormat::Q4_1) put_half(blk + 2, uniform(-0.1f, 0.1f));
  }
  return w;
}

std::vector<float> dequantize(kernels::QFormat f, const std::vector<uint8_t>& w, uint32_t out,
                              uint32_t in) {
  std::vector<float> d(size_t(out) * in);
  kernels::quant::dequantize_rows(ggml_type(f), w.data(), d.data(), in, out, 1);
  return d;
}

std::vector<kernels::QIsa> available_isas() {
  std::vector<kernels::QIsa> v;
  for (kernels::QIsa isa : {kernels::QIsa::Scalar, kernels::QIsa::Avx2, kernels::QIsa::Avx512})
    if (kernels::qisa_available(isa)) v.push_back(isa);
  return v;
}

// qgemv with `isa` vs ref::gemm on the dequantized matrix; returns the relative error.
double qgemv_error(kernels::QIsa isa, kernels::QFormat f, uint32_t out, uint32_t in, bool bias,
                   kernels::ThreadPool* pool) {
  const auto w = random_blocks(f, out, in, 11 + in + out);
  const auto x = test::random_vector(in, 12, -2.0f, 2.0f);
  const auto b = test::random_vector(out, 13);
  std::vector<float> got(out, -7.0f), want(out);
  kernels::QGemvArgs a{f, w.data(), x.data(), bias ? b.data() : nullptr, got.data(), in, out};
  kernels::cpu::qgemv(pool, std::span<const kernels::QGemvArgs>(&a, 1), isa);
  ref::gemm(x.data(), dequantize(f, w, out, in).data(), a.bias, want.data(), 1, in, out);
  return test::rel_error(got, want);
}

}  // namespace

TEST_CASE("the quantized GEMV equals the fp32 product of the dequantized blocks on every ISA",
          "[kernels]") {
  kernels::ThreadPool pool(3);
  REQUIRE(kernels::qisa_available(kernels::QIsa::Scalar));
  REQUIRE(kernels::qisa_available(kernels::qisa_best()));
  for (kernels::QIsa isa : available_isas()) {
    for (kernels::QFormat f :
         {kernels::QFormat::Q4_0, kernels::QFormat::Q4_1, kernels::QFormat::Q8_0}) {
      INFO(kernels::qisa_name(isa) << " " << kernels::qformat_name(f));
      CHECK(qgemv_error(isa, f, 1, 32, false, nullptr) < 1e-5);    // one block
      CHECK(qgemv_error(isa, f, 7, 64, true, nullptr) < 1e-5);     // even block count, bias
      CHECK(qgemv_error(isa, f, 301, 576, true, &pool) < 1e-5);    // SmolLM2 width, row tail
      CHECK(qgemv_error(isa, f, 130, 1536, false, &pool) < 1e-5);  // F-wide rows, 3 tasks
      CHECK(qgemv_error(isa, f, 5, 96, false, &pool) < 1e-5);      // odd block count
    }
  }
}

TEST_CASE("every ISA gives the scalar result up to summation order", "[kernels]") {
  const uint32_t out = 67, in = 576;
  const auto x = test::random_vector(in, 21, -3.0f, 3.0f);
  for (kernels::QFormat f :
       {kernels::QFormat::Q4_0, kernels::QFormat::Q4_1, kernels::QFormat::Q8_0}) {
    const auto w = random_blocks(f, out, in, 22);
    std::vector<float> scalar(out), other(out);
    kernels::QGemvArgs a{f, w.data(), x.data(), nullptr, scalar.data(), in, out};
    kernels::cpu::qgemv(nullptr, std::span<const kernels::QGemvArgs>(&a, 1), kernels::QIsa::Scalar);
    for (kernels::QIsa isa : available_isas()) {
      a.y = other.data();
      kernels::cpu::qgemv(nullptr, std::span<const kernels::QGemvArgs>(&a, 1), isa);
      INFO(kernels::qisa_name(isa) << " " << kernels::qformat_name(f));
      CHECK(test::rel_error(other, scalar) < 2e-6);
    }
  }
}

TEST_CASE("a batch of GEMVs gives each job's single-call result", "[kernels]") {
  kernels::ThreadPool pool(2);
  const uint32_t in = 128;
  const auto x = test::random_vector(in, 31);
  const auto bias = test::random_vector(200, 32);
  const kernels::QFormat formats[3] = {kernels::QFormat::Q4_1, kernels::QFormat::Q8_0,
                                       kernels::QFormat::Q4_0};
  const uint32_t outs[3] = {200, 65, 3};
  std::vector<std::vector<uint8_t>> w;
  std::vector<std::vector<float>> batch(3), single(3);
  std::vector<kernels::QGemvArgs> jobs;
  for (int j = 0; j < 3; ++j) {
    w.push_back(random_blocks(formats[j], outs[j], in, 33 + j));
    batch[j].assign(outs[j], 0.0f);
    single[j].assign(outs[j], 0.0f);
    jobs.push_back({formats[j], w[j].data(), x.data(), j == 0 ? bias.data() : nullptr,
                    batch[j].data(), in, outs[j]});
  }
  qgemv(kernels::Exec{kernels::Device::Cpu, &pool}, jobs);
  for (int j = 0; j < 3; ++j) {
    kernels::QGemvArgs one = jobs[j];
    one.y = single[j].data();
    qgemv(kernels::Exec{kernels::Device::Cpu, nullptr}, one);
    CHECK(batch[j] == single[j]);  // same row kernel, same order: bit-identical
  }
}

TEST_CASE("the quantized GEMV refuses bad shapes, null pointers and absent ISAs", "[kernels]") {
  const auto w = random_blocks(kernels::QFormat::Q8_0, 2, 64, 41);
  std::vector<float> x(64), y(2);
  kernels::QGemvArgs a{kernels::QFormat::Q8_0, w.data(), x.data(), nullptr, y.data(), 64, 2};
  kernels::Exec ex{kernels::Device::Cpu, nullptr};
  CHECK_NOTHROW(qgemv(ex, a));
  kernels::QGemvArgs bad = a;
  bad.in = 48;
  CHECK_THROWS_WITH(qgemv(ex, bad), Catch::Contains("multiple of the block size"));
  bad = a;
  bad.x = nullptr;
  CHECK_THROWS_WITH(qgemv(ex, bad), Catch::Contains("null"));
  CHECK_THROWS_AS(qgemv(kernels::Exec{kernels::Device::Cuda, nullptr}, a), Error);
  for (kernels::QIsa isa : {kernels::QIsa::Avx2, kernels::QIsa::Avx512})
    if (!kernels::qisa_available(isa))
      CHECK_THROWS_WITH(
          kernels::cpu::qgemv(nullptr, std::span<const kernels::QGemvArgs>(&a, 1), isa),
          Catch::Contains("not available"));
}

namespace {

// A tiny llama GGUF with Q4_1 layer matrices and a Q8_0 embedding, loaded back (the weights keep
// the file image alive), and the canonical fp32 values the file encodes.
struct TinyQuantized {
  model::Weights w;
  model::Weights want;
};
TinyQuantized tiny_quantized_weights() {
  test::TinyModelSpec spec;
  spec.config = test::tiny_gguf_llama_config();
  spec.dtype = kernels::quant::GgmlType::Q4_1;
  spec.embd_dtype = kernels::quant::GgmlType::Q8_0;
  spec.seed = 5;
  test::TinyModel m = test::make_tiny_model(spec);
  return {model::load_weights(test::open_bytes(m.bytes)), std::move(m.weights)};
}

// The matrix is still in the file's type and reads back as the canonical fp32 values.
void check_blocks(const model::Matrix& q, const model::Matrix& fp32, kernels::quant::GgmlType t,
                  const char* name) {
  INFO(name);
  CHECK(q.type == t);
  CHECK(q.owned == nullptr);  // points into the file, no copy
  CHECK(to_f32(q) == to_f32(fp32));
}

}  // namespace

TEST_CASE("the GGUF loader keeps the file's Q4_1/Q8_0 blocks and reads them in canonical order",
          "[model][kernels]") {
  const TinyQuantized t = tiny_quantized_weights();
  for (size_t l = 0; l < t.w.layers.size(); ++l) {
    const model::LayerWeights& lw = t.w.layers[l];
    const model::LayerWeights& want = t.want.layers[l];
    check_blocks(lw.wq, want.wq, kernels::quant::GgmlType::Q4_1,
                 "wq");  // Q/K rows through the row map
    CHECK(lw.wq.row_map.size() == lw.wq.rows);
    check_blocks(lw.wk, want.wk, kernels::quant::GgmlType::Q4_1, "wk");
    check_blocks(lw.wv, want.wv, kernels::quant::GgmlType::Q4_1, "wv");
    CHECK(lw.wv.row_map.empty());
    check_blocks(lw.wo, want.wo, kernels::quant::GgmlType::Q4_1, "wo");
    check_blocks(lw.w_gate, want.w_gate, kernels::quant::GgmlType::Q4_1, "w_gate");
    check_blocks(lw.w_up, want.w_up, kernels::quant::GgmlType::Q4_1, "w_up");
    check_blocks(lw.w_down, want.w_down, kernels::quant::GgmlType::Q4_1, "w_down");
  }
  check_blocks(t.w.lm_head(), t.want.lm_head(), kernels::quant::GgmlType::Q8_0, "tied lm head");
}

// The fast path quantizes every matmul input to int8 per 32-element block (kernels/qdot.h): on this
// tiny random model its logits stay within 10% of the largest exact logit (measured 0.015-0.042;
// random weights leave near-ties, so the argmax is not compared).
TEST_CASE("the fast path's logits stay within the 8-bit bound of the exact path's",
          "[model][kernels]") {
  const model::Weights w = tiny_quantized_weights().w;
  model::ForwardOptions fast, exact;
  fast.threads = exact.threads = 2;
  exact.matmul = kernels::MatmulPath::Exact;
  model::Forward fq(w, fast), ff(w, exact);
  CHECK(fq.matmul_path() == kernels::MatmulPath::Fast);
  CHECK(ff.matmul_path() == kernels::MatmulPath::Exact);
  model::KvCache cq(w.config, 16), cf(w.config, 16);
  const std::vector<int32_t> prompt = {5, 77, 200, 13};
  const std::vector<float> pq = fq.prefill(cq, prompt), pf = ff.prefill(cf, prompt);
  CHECK(test::rel_error(pq, pf) < 0.1);
  CHECK(test::rel_error(pq, pf) > 0.0);  // the fast path really ran the 8-bit kernels
  for (int32_t tok : {42, 7, 281, 0, 99})
    CHECK(test::rel_error(fq.decode(cq, tok), ff.decode(cf, tok)) < 0.1);
}

TEST_CASE("a matrix of the wrong shape or a broken row map is refused by Forward",
          "[model][kernels]") {
  model::Weights w = tiny_quantized_weights().w;
  w.layers[1].w_up.rows -= 1;
  CHECK_THROWS_WITH(model::Forward(w), Catch::Contains("layers[1].w_up is"));
  w = tiny_quantized_weights().w;
  w.layers[0].wk.row_map[0] = w.layers[0].wk.row_map[1];
  CHECK_THROWS_WITH(model::Forward(w),
                    Catch::Contains("layers[0].wk has a row map that is not a permutation"));
  w = tiny_quantized_weights().w;
  w.layers[0].wv.type = kernels::quant::GgmlType::Q2_K;
  CHECK_THROWS_WITH(model::Forward(w), Catch::Contains("Q2_K"));
}
