// [cuda] attention over spans with quantized rows (KvSpan::quant: a q8/q4 base as the file stores
// it, then the head's f32 rows) against the CPU kernel on the same spans (which equals
// dequantize-then-attend up to fp32 order: tests/kernels/test_attention_quant.cc), fp32,
// tolerance 2e-5 relative as for the f32 kernels. Every layout (f16 or byte parameters, rotated or
// not, q8 and q4, one or two groups per row, D 64 and 128); decode (T = 1) and question blocks of
// up to 128 query rows per KV head (split-K directly), blocks larger than that (attention() cuts
// them into blocks of whole tokens), quantized rows in several splits and widened splits past
// 128 · 256 rows, heads without quantized rows, a head whose f32 rows are only the new tokens.
// attention_prefill refuses quantized spans. The [sanitize] case is small enough for
// compute-sanitizer and reaches the quantized kernel, rotated and not, with several splits.
#include <catch2/catch.hpp>

#include <cmath>

#include "tests/cuda/support.h"

#if KVZIP_HAVE_CUDA
#include "common/error.h"
#include "kernels/attention.h"
#include "kernels/kv_quant.h"
#include "tests/support/quant_rows.h"
#include "tests/support/random_weights.h"
#include "tests/support/thrown.h"

using namespace kvzip;
using test::gpu_ready;
using test::to_gpu;

namespace {

struct QCase {
  uint32_t T, Hq, Hkv, D, bits, group;
  std::vector<uint32_t> quant;  // quantized rows per KV head
  std::vector<uint32_t> f32;    // f32 rows per KV head, each >= T (the last T are the new tokens)
  bool rotated = false;
  bool byte_params = false;
};

enum class Path { Auto, Decode, Prefill };

// One KV head's rows on the host and on the device.
struct Head {
  test::QuantHead quant;
  std::vector<float> k, v;
  kernels::KvQuantSegment host, dev;
  kernels::gpu::GpuBuffer<float> dck, dcv, dk, dv;
  kernels::gpu::GpuBuffer<uint16_t> dpk, dpv;
  kernels::gpu::GpuBuffer<uint8_t> dqk, dqv;
};

// Relative error of the CUDA path against the CPU kernel on the same random rows.
double quant_attention_error(const QCase& c, Path path, uint64_t salt) {
  const uint64_t seed = test::seed(salt);
  const kernels::KvQuantLayout L{c.bits, c.D, c.group, c.rotated, c.byte_params};
  const auto q = test::random_vector(size_t(c.T) * c.Hq * c.D, seed, -2, 2);
  std::vector<Head> heads(c.Hkv);
  std::vector<kernels::KvSpan> spans(c.Hkv), dspans(c.Hkv);
  for (uint32_t h = 0; h < c.Hkv; ++h) {
    Head& H = heads[h];
    const size_t D = c.D, nq = c.quant[h], nf = c.f32[h];
    H.quant = test::quantized_head(L, nq, seed * 7 + h);
    const test::QuantHead& Q = H.quant;
    H.k = test::random_vector(nf * D, seed * 47 + h, -2, 2);
    H.v = test::random_vector(nf * D, seed * 53 + h, -2, 2);
    H.host = Q.segment();
    H.dck = to_gpu(Q.ck), H.dcv = to_gpu(Q.cv), H.dpk = to_gpu(Q.pk), H.dpv = to_gpu(Q.pv);
    H.dqk = to_gpu(Q.qk), H.dqv = to_gpu(Q.qv), H.dk = to_gpu(H.k), H.dv = to_gpu(H.v);
    H.dev = {{L, nq, H.dck.data(), H.dpk.data(), H.dqk.data()},
             {L, nq, H.dcv.data(), H.dpv.data(), H.dqv.data()}};
    spans[h] = kernels::KvSpan{H.k.data(), H.v.data(), c.f32[h]};
    dspans[h] = kernels::KvSpan{H.dk.data(), H.dv.data(), c.f32[h]};
    if (nq) spans[h].quant = &H.host, dspans[h].quant = &H.dev;
  }
  std::vector<float> want(q.size());
  kernels::AttentionArgs a{q.data(), spans.data(), want.data(), c.T,
                           c.Hq,     c.Hkv,        c.D,         1.0f / std::sqrt(float(c.D))};
  attention(kernels::Exec{}, a);
  auto dq = to_gpu(q);
  auto dout = test::poisoned(q.size());
  kernels::AttentionArgs g = a;
  g.q = dq.data();
  g.kv = dspans.data();
  g.out = dout.data();
  switch (path) {
    case Path::Auto: attention(kernels::Exec{kernels::Device::Cuda, nullptr, nullptr}, g); break;
    case Path::Decode: kernels::cuda::attention_decode(g, nullptr); break;
    case Path::Prefill: kernels::cuda::attention_prefill(g, nullptr); break;
  }
  INFO("T " << c.T << " Hq " << c.Hq << " Hkv " << c.Hkv << " D " << c.D << " q" << c.bits
            << " group " << c.group << " rotated " << c.rotated << " byte params "
            << c.byte_params);
  return test::rel_error(dout.download(), want);
}

struct Form {
  bool rotated, byte_params;
};
constexpr Form kForms[] = {{false, false},
                           {true, false},
                           {true, true},
                           {false, true}};  // v1.2, v1.3, v1.4, and byte unrotated

}  // namespace

TEST_CASE("cuda attention over quantized spans matches the CPU kernel, every layout", "[cuda]") {
  if (!gpu_ready()) return;
  for (const Form f : kForms)
    for (uint32_t bits : {8u, 4u}) {
      INFO("rotated " << f.rotated << " byte params " << f.byte_params << " q" << bits);
      // Decode, GQA 3: quantized rows in one split, in four, and none; f32 rows only the new token
      // in one head.
      CHECK(quant_attention_error(
                {1, 9, 3, 64, bits, 64, {300, 1000, 0}, {5, 1, 40}, f.rotated, f.byte_params},
                Path::Auto, bits * 10 + f.rotated * 2 + f.byte_params) < 2e-5);
      // A 20-token question, D = 128, two groups per row, GQA 4 (80 rows, 5 row groups).
      CHECK(quant_attention_error({20,
                                   16,
                                   4,
                                   128,
                                   bits,
                                   64,
                                   {2000, 33, 700, 0},
                                   {20, 60, 300, 21},
                                   f.rotated,
                                   f.byte_params},
                                  Path::Decode, bits * 20 + f.rotated * 2 + f.byte_params) < 2e-5);
    }
}

TEST_CASE("cuda attention cuts a long block over quantized spans into split-K blocks", "[cuda]") {
  if (!gpu_ready()) return;
  // 43 tokens · G 3 = 129 rows: one row past the split path, two blocks (42 + 1 tokens).
  CHECK(quant_attention_error({43, 9, 3, 64, 4, 64, {900, 300, 5}, {43, 100, 500}, true, true},
                              Path::Auto, 61) < 2e-5);
  // 100 tokens · G 4: four blocks of 32, 32, 32 and 4 tokens; the causal limit moves with them.
  CHECK(quant_attention_error({100, 8, 2, 128, 8, 128, {1500, 260}, {100, 400}, false, false},
                              Path::Auto, 62) < 2e-5);
  // The prefill kernel itself refuses quantized rows.
  const Error e = test::error_from(
      [&] {
        quant_attention_error({40, 4, 1, 64, 4, 64, {10}, {40}, true, true}, Path::Prefill, 63);
      },
      "expected Errc::unsupported");
  CHECK(e.code() == Errc::unsupported);
}

TEST_CASE("cuda attention over long quantized bases widens the quantized splits", "[cuda]") {
  if (!gpu_ready()) return;
  // 40,000 quantized rows: 128 · 256 < 40,000, so splits of 512 rows; f32 rows short.
  CHECK(quant_attention_error({1, 4, 1, 64, 4, 64, {40000}, {3}, true, true}, Path::Auto, 71) <
        2e-5);
  // Llama-3's heads (32 / 8): ragged quantized rows from none to 36,000, f32 rows from T up.
  CHECK(quant_attention_error({4,
                               32,
                               8,
                               128,
                               4,
                               128,
                               {36000, 9000, 1, 0, 300, 300, 5, 20000},
                               {4, 9, 10, 3000, 4, 4, 4, 20},
                               true,
                               true},
                              Path::Decode, 72) < 2e-5);
}

TEST_CASE("cuda attention over quantized spans on small shapes (for the sanitizers)",
          "[cuda][sanitize]") {
  if (!gpu_ready()) return;
  CHECK(quant_attention_error({3, 4, 2, 64, 4, 64, {600, 0}, {3, 30}, true, true}, Path::Auto, 81) <
        2e-5);
  CHECK(quant_attention_error({1, 4, 2, 128, 8, 64, {70, 300}, {2, 1}, false, false}, Path::Auto,
                              82) < 2e-5);
  // 70 tokens · G 2 = 140 rows: two blocks (64 + 6 tokens), two groups per row.
  CHECK(quant_attention_error({70, 4, 2, 64, 4, 32, {40, 20}, {70, 80}, true, false}, Path::Auto,
                              83) < 2e-5);
}

#else

TEST_CASE("cuda quantized attention is skipped in a CPU-only build", "[cuda]") {
  CHECK_FALSE(kvzip::test::gpu_ready());
}

#endif
