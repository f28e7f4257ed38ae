// Attention over spans with quantized rows (KvSpan::quant: a q8/q4 base attended in place, then
// f32 rows: the base's f16-stored rows and the question/answer tail) against dequantize-then-
// attend: the same rows dequantized (cpu::kv_dequantize_rows) into one contiguous f32 span and
// attended by the f32 kernel. Random inputs with key outlier channels; T = 1, 3, 17; GQA groups of
// 1, 3 and 4; q8 and q4, one and two groups per row; bases longer than one 256-row chunk, heads
// without quantized rows or without f32 base rows, a tail that is only the T new rows (all of it
// covered by T) and one with earlier rows. The only difference allowed is fp32 summation order
// (the scores of quantized rows are formed per group as s·Σ(c·q)·code + m·Σ(c·q), softmax and
// merge by log-sum-exp): relative error below 2e-6 over the whole output (measured: at most
// 6.6e-7). The result must not depend on the thread pool; local statistics refuse quantized spans,
// the CUDA front takes them in one segment (the CUDA kernel's parity:
// tests/cuda/test_cuda_attention_quant.cc). Hadamard-rotated bases (v1.3) too: there the quantized
// part rotates the queries and the output instead of the rows, which adds the rotation's rounding
// to the summation order's.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "common/error.h"
#include "kernels/attention.h"
#include "kernels/kv_quant.h"
#include "kernels/thread_pool.h"
#include "tests/support/random_weights.h"
#include "tests/support/thrown.h"

using namespace kvzip;

namespace {

struct QCase {
  uint32_t T, Hq, Hkv, D, bits, group;
  std::vector<uint32_t> quant;  // quantized rows per KV head
  std::vector<uint32_t> dense;  // f32 base rows per KV head
  std::vector<uint32_t> tail;   // tail rows per KV head, each >= T (the last T are the new tokens)
  bool rotated = false;         // Hadamard-rotated codes (D a power of two)
  bool byte_params = false;     // byte group parameters (v1.4)
};

// One KV head: quantized rows (stored form), the f32 base rows and the tail, in separate buffers.
struct Head {
  std::vector<float> ck, cv;
  std::vector<uint16_t> pk, pv;
  std::vector<uint8_t> qk, qv;
  std::vector<float> kb, vb, kt, vt;  // (dense, D), (tail, D)
  kernels::KvQuantSegment seg;
  std::vector<float> k, v;  // dequantize-then-attend: [dequant(quant) ; base ; tail] contiguous
};

std::vector<float> with_outliers(std::vector<float> x, uint32_t D) {
  for (size_t i = 0; i < x.size(); ++i)
    if (i % D % 11 == 3) x[i] = 8.0f * x[i] + 2.0f;  // keys' typical outlier channels
  return x;
}

struct QData {
  std::vector<float> q;
  std::vector<Head> heads;
  std::vector<kernels::KvSpan> quant, whole;
};

QData make(const QCase& c, uint64_t seed) {
  QData d;
  d.q = test::random_vector(size_t(c.T) * c.Hq * c.D, seed, -1.5f, 1.5f);
  d.heads.resize(c.Hkv);
  const kernels::KvQuantLayout L{c.bits, c.D, c.group, c.rotated, c.byte_params};
  for (uint32_t h = 0; h < c.Hkv; ++h) {
    Head& H = d.heads[h];
    const size_t D = c.D, nq = c.quant[h], nb = c.dense[h], nt = c.tail[h];
    const uint64_t s = seed * 101 + h * 7;
    const std::vector<float> xk = with_outliers(test::random_vector(nq * D, s + 1, -1, 1), c.D);
    const std::vector<float> xv = test::random_vector(nq * D, s + 2, -1, 1);
    H.ck.resize(D), H.cv.resize(D);
    H.pk.resize(nq * L.param_words()), H.pv.resize(nq * L.param_words());
    H.qk.resize(nq * L.code_bytes()), H.qv.resize(nq * L.code_bytes());
    kernels::cpu::kv_quantize_rows(xk.data(), {L, nq, H.ck.data(), H.pk.data(), H.qk.data()});
    kernels::cpu::kv_quantize_rows(xv.data(), {L, nq, H.cv.data(), H.pv.data(), H.qv.data()});
    H.seg = kernels::KvQuantSegment{{L, nq, H.ck.data(), H.pk.data(), H.qk.data()},
                                    {L, nq, H.cv.data(), H.pv.data(), H.qv.data()}};
    H.kb = with_outliers(test::random_vector(nb * D, s + 3, -2, 2), c.D);
    H.vb = test::random_vector(nb * D, s + 4, -2, 2);
    H.kt = with_outliers(test::random_vector(nt * D, s + 5, -1, 1), c.D);
    H.vt = test::random_vector(nt * D, s + 6, -1, 1);
    H.k.resize((nq + nb + nt) * D), H.v.resize((nq + nb + nt) * D);
    kernels::cpu::kv_dequantize_rows(H.seg.k, H.k.data());
    kernels::cpu::kv_dequantize_rows(H.seg.v, H.v.data());
    std::copy(H.kb.begin(), H.kb.end(), H.k.begin() + nq * D);
    std::copy(H.vb.begin(), H.vb.end(), H.v.begin() + nq * D);
    std::copy(H.kt.begin(), H.kt.end(), H.k.begin() + (nq + nb) * D);
    std::copy(H.vt.begin(), H.vt.end(), H.v.begin() + (nq + nb) * D);
  }
  for (uint32_t h = 0; h < c.Hkv; ++h) {  // after the vectors are in place: spans point into them
    Head& H = d.heads[h];
    const uint32_t nb = c.dense[h], nt = c.tail[h];
    kernels::KvSpan s =
        nb ? kernels::KvSpan{H.kb.data(), H.vb.data(), nb + nt, H.kt.data(), H.vt.data(), nb}
           : kernels::KvSpan{H.kt.data(), H.vt.data(), nt};
    s.quant = c.quant[h] ? &H.seg : nullptr;
    d.quant.push_back(s);
    d.whole.push_back(kernels::KvSpan{H.k.data(), H.v.data(), c.quant[h] + nb + nt});
  }
  return d;
}

kernels::AttentionArgs args_for(const QCase& c, const QData& d,
                                const std::vector<kernels::KvSpan>& spans, float* out) {
  return kernels::AttentionArgs{d.q.data(), spans.data(), out, c.T,
                                c.Hq,       c.Hkv,        c.D, 1.0f / std::sqrt(float(c.D))};
}

// Quantized spans against dequantize-then-attend; returns the relative error.
double check_case(const QCase& c, kernels::ThreadPool* pool, uint64_t seed) {
  const QData d = make(c, seed);
  const size_t n = size_t(c.T) * c.Hq * c.D;
  std::vector<float> want(n), got(n, NAN), alone(n, NAN);
  attention(kernels::Exec{kernels::Device::Cpu, pool}, args_for(c, d, d.whole, want.data()));
  attention(kernels::Exec{kernels::Device::Cpu, pool}, args_for(c, d, d.quant, got.data()));
  attention(kernels::Exec{kernels::Device::Cpu, nullptr}, args_for(c, d, d.quant, alone.data()));
  const double err = test::rel_error(got, want);
  INFO("T " << c.T << " Hq " << c.Hq << " Hkv " << c.Hkv << " q" << c.bits << " group " << c.group
            << " rotated " << c.rotated << " byte params " << c.byte_params);
  CHECK(err < 2e-6);
  CHECK(std::memcmp(got.data(), alone.data(), n * sizeof(float)) == 0);  // pool-independent
  return err;
}

}  // namespace

TEST_CASE("attention over a span of quantized base and f32 tail rows equals dequantize-then-attend",
          "[kernels][kvquant-attn]") {
  kernels::ThreadPool pool(2);
  for (auto [rot, bytes] : {std::pair{false, false}, std::pair{true, false}, std::pair{true, true}})
    for (uint32_t bits : {8u, 4u}) {
      for (uint32_t T : {1u, 3u, 17u}) {
        // GQA group 3: the first head spans two quantized chunks; the tail holds only the new rows
        // in one head (T covers all of it) and earlier rows too in the others.
        check_case(
            {T, 9, 3, 64, bits, 64, {300, 40, 257}, {4, 0, 24}, {T, T + 6, T + 30}, rot, bytes},
            &pool, bits * 10 + T);
        // Group 4, two parameter groups per row, D = 32.
        check_case({T, 8, 2, 32, bits, 16, {130, 9}, {2, 5}, {T + 1, T}, rot, bytes}, &pool,
                   bits * 20 + T);
        // Group 1 (MHA), one thread.
        check_case({T, 2, 2, 16, bits, 16, {70, 513}, {0, 1}, {T, T + 2}, rot, bytes}, nullptr,
                   bits * 30 + T);
      }
    }
}

TEST_CASE("quantized attention: heads without quantized rows keep the f32 result bit for bit",
          "[kernels][kvquant-attn]") {
  kernels::ThreadPool pool(2);
  const QCase c{3, 8, 2, 32, 4, 32, {0, 100}, {5, 5}, {7, 7}};
  const QData d = make(c, 5);
  REQUIRE(d.quant[0].quant == nullptr);
  const size_t n = size_t(c.T) * c.Hq * c.D, per_token = size_t(c.Hq) * c.D, half = per_token / 2;
  std::vector<float> mixed(n), plain(n);
  attention(kernels::Exec{kernels::Device::Cpu, &pool}, args_for(c, d, d.quant, mixed.data()));
  // The same f32 rows with no quantized span anywhere take the f32 kernel alone.
  std::vector<kernels::KvSpan> f32 = d.quant;
  f32[1].quant = nullptr;
  attention(kernels::Exec{kernels::Device::Cpu, &pool}, args_for(c, d, f32, plain.data()));
  for (uint32_t t = 0; t < c.T; ++t) {  // KV head 0 owns the first half of each token's heads
    CHECK(std::memcmp(mixed.data() + t * per_token, plain.data() + t * per_token,
                      half * sizeof(float)) == 0);
    CHECK(std::memcmp(mixed.data() + t * per_token + half, plain.data() + t * per_token + half,
                      half * sizeof(float)) != 0);  // head 1 did see its quantized rows
  }
  CHECK(check_case(c, &pool, 5) < 2e-6);
}

TEST_CASE("the CUDA front takes quantized spans in one segment; local statistics refuse them",
          "[kernels][kvquant-attn]") {
  // One segment (no f32 base rows): what the GPU cache hands the CUDA split-K path.
  const QCase c{2, 2, 1, 16, 4, 16, {10}, {0}, {2}};
  const QData d = make(c, 9);
  std::vector<float> out(size_t(c.T) * c.Hq * c.D);
  kernels::AttentionArgs a = args_for(c, d, d.quant, out.data());
  REQUIRE(d.quant[0].quantized());
  CHECK_NOTHROW(kernels::check_cuda_attention(a));
  // Quantized rows ahead of two f32 segments (a served request's base and tail): still refused,
  // for the two segments.
  const QCase c2{2, 2, 1, 16, 4, 16, {10}, {3}, {2}};
  const QData d2 = make(c2, 9);
  REQUIRE(d2.quant[0].two_segments());
  const Error e = test::error_from(
      [&] { kernels::check_cuda_attention(args_for(c2, d2, d2.quant, out.data())); },
      "expected Errc::unsupported");
  CHECK(e.code() == Errc::unsupported);
  CHECK(std::string(e.what()).find("two segments") != std::string::npos);
  std::vector<float> stats(16, 0.0f);
  kernels::LocalMaxProb L{0, 0, 0, 0, stats.data(), 16};
  a.local = &L;
  CHECK(test::error_from([&] { kernels::attention(kernels::Exec{}, a); },
                         "expected Errc::unsupported")
            .code() == Errc::unsupported);
}
