// Causal GQA attention (prefill and decode) against the naive reference: cached prefixes, ragged
// per-head lengths, head dims that are not a multiple of the vector width, key splitting; a decode
// step's rows against the same rows in a longer call, bit for bit.
#include <catch2/catch.hpp>

#include <cmath>

#include "kernels/attention.h"
#include "kernels/detail/attention_isa.h"
#include "kernels/qgemv.h"
#include "kernels/thread_pool.h"
#include "tests/support/random_weights.h"
#include "tests/support/reference.h"

using namespace kvzip;

namespace {

struct Case {
  uint32_t T, Hq, Hkv, D;
  std::vector<uint32_t> lens;  // per KV head, each >= T
};

// Runs kernel and reference on random data; returns the relative error.
double attention_error(const Case& c, kernels::ThreadPool* pool, uint64_t seed) {
  auto q = test::random_vector(size_t(c.T) * c.Hq * c.D, seed, -2, 2);
  std::vector<std::vector<float>> k(c.Hkv), v(c.Hkv);
  std::vector<kernels::KvSpan> spans(c.Hkv);
  for (uint32_t h = 0; h < c.Hkv; ++h) {
    k[h] = test::random_vector(size_t(c.lens[h]) * c.D, seed * 31 + h, -2, 2);
    v[h] = test::random_vector(size_t(c.lens[h]) * c.D, seed * 37 + h);
    spans[h] = kernels::KvSpan{k[h].data(), v[h].data(), c.lens[h]};
  }
  std::vector<float> got(q.size(), NAN), want(q.size());
  kernels::AttentionArgs a;
  a.q = q.data();
  a.kv = spans.data();
  a.T = c.T;
  a.Hq = c.Hq;
  a.Hkv = c.Hkv;
  a.D = c.D;
  a.scale = 1.0f / std::sqrt(float(c.D));
  a.out = want.data();
  ref::attention(a);
  a.out = got.data();
  attention(kernels::Exec{kernels::Device::Cpu, pool}, a);
  return test::rel_error(got, want);
}

}  // namespace

TEST_CASE("prefill attention over an empty cache matches the reference", "[kernels]") {
  kernels::ThreadPool pool(2);
  CHECK(attention_error({70, 4, 2, 16, {70, 70}}, &pool, 1) < 1e-5);
  CHECK(attention_error({150, 9, 3, 64, {150, 150, 150}}, &pool, 2) < 1e-5);
  CHECK(attention_error({5, 2, 2, 8, {5, 5}}, nullptr, 3) < 1e-5);  // G = 1
}

TEST_CASE("prefill attention after a cached prefix matches the reference", "[kernels]") {
  kernels::ThreadPool pool(2);
  CHECK(attention_error({33, 4, 2, 16, {300, 300}}, &pool, 4) < 1e-5);
  CHECK(attention_error({3, 6, 2, 32, {260, 260}}, &pool, 5) < 1e-5);  // few tasks: key splits
}

TEST_CASE("attention handles per-head lengths as a ragged cache has them", "[kernels]") {
  kernels::ThreadPool pool(3);
  CHECK(attention_error({12, 6, 3, 16, {12, 140, 61}}, &pool, 6) < 1e-5);
  CHECK(attention_error({1, 6, 3, 16, {1, 700, 300}}, &pool, 7) < 1e-5);
}

TEST_CASE("attention handles head dims that are not a multiple of the vector width", "[kernels]") {
  CHECK(attention_error({20, 4, 2, 20, {50, 50}}, nullptr, 8) < 1e-5);
  CHECK(attention_error({9, 3, 1, 6, {9}}, nullptr, 9) < 1e-5);
}

TEST_CASE("decode attention (one token) over a long cache matches the reference", "[kernels]") {
  kernels::ThreadPool pool(2);
  CHECK(attention_error({1, 9, 3, 64, {1000, 1000, 1000}}, &pool, 10) < 1e-5);
  CHECK(attention_error({1, 4, 2, 16, {1, 1}}, &pool, 11) < 1e-5);
  CHECK(attention_error({1, 8, 1, 128, {513}}, nullptr, 12) < 1e-5);
}

TEST_CASE("each query head reads the KV head of its group", "[kernels]") {
  // Two KV heads whose values are constant vectors 1 and 2: every output row of a query head in
  // group g must equal g + 1 whatever the scores are.
  const uint32_t T = 4, Hq = 6, Hkv = 2, D = 8, len = 10;
  auto q = test::random_vector(T * Hq * D, 13);
  std::vector<float> k0 = test::random_vector(len * D, 14), k1 = test::random_vector(len * D, 15);
  std::vector<float> v0(len * D, 1.0f), v1(len * D, 2.0f), out(T * Hq * D);
  kernels::KvSpan spans[2] = {{k0.data(), v0.data(), len}, {k1.data(), v1.data(), len}};
  kernels::AttentionArgs a{q.data(), spans, out.data(), T, Hq, Hkv, D, 0.25f};
  attention(kernels::Exec{}, a);
  for (uint32_t t = 0; t < T; ++t)
    for (uint32_t h = 0; h < Hq; ++h)
      for (uint32_t d = 0; d < D; ++d) REQUIRE(out[(t * Hq + h) * D + d] == Approx(h / 3 + 1.0));
}

TEST_CASE("the first new token attends only to itself when the cache was empty", "[kernels]") {
  const uint32_t T = 3, D = 4;
  auto q = test::random_vector(T * D, 16);
  auto k = test::random_vector(T * D, 17);
  auto v = test::random_vector(T * D, 18);
  std::vector<float> out(T * D);
  kernels::KvSpan span{k.data(), v.data(), T};
  attention(kernels::Exec{}, kernels::AttentionArgs{q.data(), &span, out.data(), T, 1, 1, D, 0.5f});
  for (uint32_t d = 0; d < D; ++d) CHECK(out[d] == Approx(v[d]));
}

TEST_CASE("both vector widths of the attention kernel match the reference", "[kernels]") {
  // The entry points run one of them (attention_isa.h); here each is called directly, so an AVX2
  // machine and an AVX-512 one both check the kernel they do not pick.
  const kernels::QIsa isa = kernels::qisa_best();
  const bool has512 =
      KVZIP_ATTENTION_AVX512 && (isa == kernels::QIsa::Avx512 || isa == kernels::QIsa::Avx512Vnni ||
                                 isa == kernels::QIsa::Amx);
  if (!has512)
    WARN("no AVX-512 on this CPU (or KVZIP_CPU_ISA below it): the 16-lane kernel is not run");
  kernels::ThreadPool pool(2);
  for (const Case& c : {Case{1, 9, 3, 64, {700, 700, 700}}, Case{37, 8, 2, 128, {300, 37}},
                        Case{5, 4, 1, 20, {40}}}) {
    auto q = test::random_vector(size_t(c.T) * c.Hq * c.D, 3, -2, 2);
    std::vector<std::vector<float>> k(c.Hkv), v(c.Hkv);
    std::vector<kernels::KvSpan> spans(c.Hkv);
    for (uint32_t h = 0; h < c.Hkv; ++h) {
      k[h] = test::random_vector(size_t(c.lens[h]) * c.D, 40 + h, -2, 2);
      v[h] = test::random_vector(size_t(c.lens[h]) * c.D, 50 + h);
      spans[h] = kernels::KvSpan{k[h].data(), v[h].data(), c.lens[h]};
    }
    kernels::AttentionArgs a;
    a.q = q.data();
    a.kv = spans.data();
    a.T = c.T, a.Hq = c.Hq, a.Hkv = c.Hkv, a.D = c.D;
    a.scale = 1.0f / std::sqrt(float(c.D));
    std::vector<float> want(q.size()), base(q.size(), NAN), wide(q.size(), NAN);
    a.out = want.data();
    ref::attention(a);
    a.out = base.data();
    kernels::cpu::base::attention_f32(&pool, a, nullptr);
    CHECK(test::rel_error(base, want) < 1e-5);
#if KVZIP_ATTENTION_AVX512
    if (has512) {
      a.out = wide.data();
      kernels::cpu::avx512::attention_f32(&pool, a, nullptr);
      CHECK(test::rel_error(wide, want) < 1e-5);
    }
#endif
  }
}

TEST_CASE("a decode step's rows get the bits they get inside a longer call", "[kernels]") {
  // A one-token call (one block of query rows: each key tile walked in memory order) and the last
  // token of a two-token call (two blocks: the strip-wise micro-tile) see the same keys with the
  // same query; each score is one chain over the head dim either way. Key counts leave last
  // blocks of every width a walk takes on 8 and 16 lanes; head dims whose V rows take one walk,
  // two, and a partial one (P·V). One thread, so no key splits.
  const uint32_t Hq = 9, Hkv = 3;
  for (uint32_t D : {64u, 128u, 80u})
    for (uint32_t len : {1000u, 700u, 200u, 513u, 256u, 150u}) {
      std::vector<std::vector<float>> k(Hkv), v(Hkv);
      std::vector<kernels::KvSpan> spans(Hkv);
      for (uint32_t h = 0; h < Hkv; ++h) {
        k[h] = test::random_vector(size_t(len) * D, 60 + h, -2, 2);
        v[h] = test::random_vector(size_t(len) * D, 70 + h);
        spans[h] = kernels::KvSpan{k[h].data(), v[h].data(), len};
      }
      auto two = test::random_vector(size_t(2) * Hq * D, 80 + len, -2, 2);
      kernels::AttentionArgs a;
      a.kv = spans.data();
      a.Hq = Hq, a.Hkv = Hkv, a.D = D;
      a.scale = 1.0f / std::sqrt(float(D));
      auto run = [&](auto fn) {
        std::vector<float> one(size_t(Hq) * D, NAN), both(two.size(), NAN);
        a.T = 1, a.q = two.data() + size_t(Hq) * D, a.out = one.data();
        fn(nullptr, a, nullptr);
        a.T = 2, a.q = two.data(), a.out = both.data();
        fn(nullptr, a, nullptr);
        for (size_t i = 0; i < one.size(); ++i) REQUIRE(one[i] == both[size_t(Hq) * D + i]);
      };
      INFO("len " << len << ", D " << D);
      run(kernels::cpu::base::attention_f32);
#if KVZIP_ATTENTION_AVX512
      const kernels::QIsa isa = kernels::qisa_best();
      if (isa == kernels::QIsa::Avx512 || isa == kernels::QIsa::Avx512Vnni ||
          isa == kernels::QIsa::Amx)
        run(kernels::cpu::avx512::attention_f32);
      else
        WARN("no AVX-512 on this CPU (or KVZIP_CPU_ISA below it): the 16-lane kernel is not run");
#endif
    }
}
