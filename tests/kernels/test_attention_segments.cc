// Attention over spans in two segments (KvSpan::k_tail: a shared base plus a private tail, as a
// served request's cache has them): the result must match the reference and be bit-identical to
// the same call on one contiguous copy of the rows, for splits before, inside and at key tiles
// (128 rows), prefill (shared transposed tiles) and decode (key splits), padded head dims, and
// with local statistics. The CUDA front refuses two segments before any dispatch.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "common/error.h"
#include "kernels/attention.h"
#include "kernels/thread_pool.h"
#include "tests/support/random_weights.h"
#include "tests/support/reference.h"
#include "tests/support/thrown.h"

using namespace kvzip;

namespace {

struct SegCase {
  uint32_t T, Hq, Hkv, D;
  std::vector<uint32_t> lens;    // rows per KV head, each >= T
  std::vector<uint32_t> splits;  // rows of the first segment per head, <= len
};

struct SegData {
  std::vector<float> q;
  std::vector<std::vector<float>> k, v;            // contiguous rows per head (len, D)
  std::vector<std::vector<float>> kb, vb, kt, vt;  // the same rows cut into base and tail
  std::vector<kernels::KvSpan> whole, parts;
};

SegData make(const SegCase& c, uint64_t seed) {
  SegData d;
  d.q = test::random_vector(size_t(c.T) * c.Hq * c.D, seed, -2, 2);
  for (uint32_t h = 0; h < c.Hkv; ++h) {
    const size_t len = c.lens[h], sp = c.splits[h], D = c.D;
    d.k.push_back(test::random_vector(len * D, seed * 31 + h, -2, 2));
    d.v.push_back(test::random_vector(len * D, seed * 37 + h));
    // The segments live in separate allocations, so reading across the cut would read garbage.
    d.kb.emplace_back(d.k[h].begin(), d.k[h].begin() + sp * D);
    d.vb.emplace_back(d.v[h].begin(), d.v[h].begin() + sp * D);
    d.kt.emplace_back(d.k[h].begin() + sp * D, d.k[h].end());
    d.vt.emplace_back(d.v[h].begin() + sp * D, d.v[h].end());
  }
  for (uint32_t h = 0; h < c.Hkv; ++h) {
    d.whole.push_back(kernels::KvSpan{d.k[h].data(), d.v[h].data(), c.lens[h]});
    d.parts.push_back(kernels::KvSpan{d.kb[h].data(), d.vb[h].data(), c.lens[h], d.kt[h].data(),
                                      d.vt[h].data(), c.splits[h]});
  }
  return d;
}

kernels::AttentionArgs args_for(const SegCase& c, const SegData& d,
                                const std::vector<kernels::KvSpan>& spans, float* out) {
  return kernels::AttentionArgs{d.q.data(), spans.data(), out, c.T,
                                c.Hq,       c.Hkv,        c.D, 1.0f / std::sqrt(float(c.D))};
}

// Runs the case; checks parts == whole bit for bit and parts ≈ reference.
void check_case(const SegCase& c, kernels::ThreadPool* pool, uint64_t seed) {
  const SegData d = make(c, seed);
  const size_t n = size_t(c.T) * c.Hq * c.D;
  std::vector<float> want(n), whole(n, NAN), parts(n, NAN);
  ref::attention(args_for(c, d, d.parts, want.data()));
  attention(kernels::Exec{kernels::Device::Cpu, pool}, args_for(c, d, d.whole, whole.data()));
  attention(kernels::Exec{kernels::Device::Cpu, pool}, args_for(c, d, d.parts, parts.data()));
  CHECK(test::rel_error(parts, want) < 1e-5);
  CHECK(std::memcmp(parts.data(), whole.data(), n * sizeof(float)) == 0);
}

}  // namespace

TEST_CASE("two-segment prefill attention equals one contiguous span bit for bit", "[kernels]") {
  kernels::ThreadPool pool(2);
  // Several query blocks (shared transposed tiles); cuts inside a tile, on one, at the new rows.
  check_case({70, 4, 2, 16, {300, 300}, {100, 128}}, &pool, 1);
  check_case({40, 9, 3, 64, {500, 260, 40}, {460, 0, 40}}, &pool, 2);
  check_case({33, 4, 2, 20, {200, 150}, {167, 5}}, &pool, 3);  // D = 20: padded V rows
}

TEST_CASE("two-segment decode attention equals one contiguous span bit for bit", "[kernels]") {
  kernels::ThreadPool pool(2);
  check_case({1, 9, 3, 64, {1000, 700, 301}, {999, 350, 129}}, &pool, 4);  // key splits
  check_case({1, 4, 2, 16, {1, 40}, {0, 39}}, &pool, 5);      // a head whose base is empty
  check_case({5, 6, 2, 16, {77, 77}, {72, 70}}, nullptr, 6);  // short append, one thread
}

TEST_CASE("local statistics over two segments equal those over one span", "[kernels]") {
  const SegCase c{20, 4, 2, 16, {300, 300}, {140, 200}};
  const SegData d = make(c, 7);
  kernels::ThreadPool pool(2);
  auto run = [&](const std::vector<kernels::KvSpan>& spans, std::vector<float>& out,
                 std::vector<float>& st) {
    kernels::LocalMaxProb L{10, 100, 180, 250, st.data(), 80};
    kernels::AttentionArgs a = args_for(c, d, spans, out.data());
    a.local = &L;
    attention(kernels::Exec{kernels::Device::Cpu, &pool}, a);
  };
  const size_t n = size_t(c.T) * c.Hq * c.D;
  std::vector<float> o1(n), o2(n), s1(2 * 80, 0.0f), s2(2 * 80, 0.0f);
  run(d.whole, o1, s1);
  run(d.parts, o2, s2);
  CHECK(std::memcmp(o1.data(), o2.data(), n * sizeof(float)) == 0);
  CHECK(s1 == s2);
  CHECK(s1[0] > 0.0f);
}

TEST_CASE("the CUDA attention front refuses two-segment spans", "[kernels]") {
  float dummy[16] = {};
  kernels::KvSpan span{dummy, dummy, 2, dummy + 8, dummy + 8, 1};
  float out[8];
  kernels::AttentionArgs a{dummy, &span, out, 1, 1, 1, 8, 1.0f};
  const Error e =
      test::error_from([&] { kernels::check_cuda_attention(a); }, "expected Errc::unsupported");
  CHECK(e.code() == Errc::unsupported);
  CHECK(std::string(e.what()).find("two segments") != std::string::npos);
  span.k_tail = span.v_tail = nullptr;
  CHECK_NOTHROW(kernels::check_cuda_attention(a));
}
