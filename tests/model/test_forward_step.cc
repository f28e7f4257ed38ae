// The serving side of the forward pass: BranchCache (a private tail over a shared, read-only
// compressed base) and Forward::step (several caches advanced in one batched chunk).
//  - A branch answers bit for bit as the ragged cache itself does (same rows, same T).
//  - A step of one item is prefill() bit for bit; a step of many equals running each cache on its
//    own up to the matmul's summation order for another T (bound: relative logit error < 1e-4).
//  - Branches on one base are isolated: appends and rollbacks of one never change another's
//    logits nor a byte of the base.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>

#include "cache/branch_cache.h"
#include "cache/ragged_cache.h"
#include "common/error.h"
#include "model/forward.h"
#include "model/sampling.h"
#include "tests/support/random_weights.h"

using namespace kvzip;

namespace {

struct Fixture {
  ModelConfig cfg = test::tiny_qwen2_config();
  model::Weights w = test::random_weights(cfg, 11);
  model::Forward fwd{w, model::ForwardOptions{2, 64, {}}};
  model::RaggedKvCache base;

  static std::vector<int32_t> tokens(uint32_t n, uint32_t seed) {
    std::vector<int32_t> t(n);
    for (uint32_t i = 0; i < n; ++i) t[i] = int32_t((i * 37 + seed * 11 + 5) % 97);
    return t;
  }

  Fixture() : base(make_base()) {}

  // A 150-token document prefilled densely, then ragged: each head keeps a different subset.
  model::RaggedKvCache make_base() {
    model::KvCache dense(cfg);
    fwd.prefill(dense, tokens(150, 1), model::LogitsMode::None);
    std::vector<std::vector<uint32_t>> keep;
    for (uint32_t l = 0; l < cfg.n_layers; ++l)
      for (uint32_t h = 0; h < cfg.n_kv_heads; ++h) {
        std::vector<uint32_t> rows;
        for (uint32_t j = 0; j < 150; ++j)
          if (j < 4 || (j * 7 + l * 3 + h) % (2 + h + l) == 0) rows.push_back(j);
        keep.push_back(rows);
      }
    return model::RaggedKvCache::from_dense(dense, keep, 8);
  }

  std::vector<float> base_bytes() const {
    std::vector<float> out;
    for (uint32_t l = 0; l < cfg.n_layers; ++l)
      for (uint32_t h = 0; h < cfg.n_kv_heads; ++h) {
        const size_t n = size_t(base.kept(l, h)) * cfg.head_dim;
        out.insert(out.end(), base.k_rows(l, h), base.k_rows(l, h) + n);
        out.insert(out.end(), base.v_rows(l, h), base.v_rows(l, h) + n);
      }
    return out;
  }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("a branch over a shared base answers bit for bit as the ragged cache does", "[model]") {
  Fixture f;
  const auto question = Fixture::tokens(23, 2);
  model::RaggedKvCache own = f.base;     // a private copy, as `kvzip query` has it
  model::BranchCache branch(f.base, 4);  // small capacity: the tail grows during the test
  const auto want = f.fwd.prefill(own, question);
  const auto got = f.fwd.prefill(branch, question);
  CHECK(same_bits(got, want));
  CHECK(branch.logical_length() == own.logical_length());
  for (int32_t tok : {3, 50, 96, 7})
    CHECK(same_bits(f.fwd.decode(branch, tok), f.fwd.decode(own, tok)));
  const model::KvHeadView v = branch.view(1, 1);
  CHECK(v.split == f.base.kept(1, 1));
  CHECK(v.len == f.base.kept(1, 1) + 27);
  CHECK(v.positions_tail[0] == 150);
}

TEST_CASE("a one-item step is prefill bit for bit", "[model]") {
  Fixture f;
  const auto q = Fixture::tokens(9, 3);
  model::BranchCache a(f.base), b(f.base);
  const auto want = f.fwd.prefill(a, q);
  std::vector<float> got(f.cfg.vocab_size);
  model::StepItem item{&b, q, got.data()};
  f.fwd.step(std::span<const model::StepItem>(&item, 1));
  CHECK(same_bits(got, want));
  CHECK(b.logical_length() == a.logical_length());
}

TEST_CASE("a batched step equals each cache run on its own", "[model]") {
  Fixture f;
  const uint32_t V = f.cfg.vocab_size;
  // Four requests: three branches on the shared base at different points, one dense cache.
  model::BranchCache r0(f.base), r1(f.base), r2(f.base);
  model::KvCache r3(f.cfg);
  model::RaggedKvCache s0 = f.base, s1 = f.base, s2 = f.base;
  model::KvCache s3(f.cfg);
  const auto q0 = Fixture::tokens(12, 4), q1 = Fixture::tokens(5, 5), q2 = Fixture::tokens(20, 6),
             q3 = Fixture::tokens(7, 7);
  // r0 and r1 have their questions in; r2 gets its question during the batched steps.
  f.fwd.prefill(r0, q0);
  f.fwd.prefill(s0, q0);
  f.fwd.prefill(r1, q1);
  f.fwd.prefill(s1, q1);
  f.fwd.prefill(r3, q3);
  f.fwd.prefill(s3, q3);
  double worst = 0;
  int32_t t0 = 1, t1 = 2, t3 = 3;
  for (int step = 0; step < 6; ++step) {
    std::vector<float> l0(V), l1(V), l2(V), l3(V);
    std::vector<model::StepItem> items{{&r0, std::span<const int32_t>(&t0, 1), l0.data()},
                                       {&r1, std::span<const int32_t>(&t1, 1), l1.data()},
                                       {&r3, std::span<const int32_t>(&t3, 1), l3.data()}};
    std::span<const int32_t> piece;
    if (step < 2) {  // r2's question in two pieces, the second wanting logits
      piece = std::span<const int32_t>(q2).subspan(step * 10, 10);
      items.insert(items.begin() + 1, model::StepItem{&r2, piece, step == 1 ? l2.data() : nullptr});
    } else {
      items.insert(items.begin() + 1,
                   model::StepItem{&r2, std::span<const int32_t>(&t0, 1), l2.data()});
    }
    f.fwd.step(items);
    const auto w0 = f.fwd.decode(s0, t0), w1 = f.fwd.decode(s1, t1), w3 = f.fwd.decode(s3, t3);
    std::vector<float> w2;
    if (step < 2) {
      w2 = f.fwd.prefill(s2, piece);
    } else {
      w2 = f.fwd.decode(s2, t0);
    }
    for (auto [got, want] : {std::pair{&l0, &w0}, {&l1, &w1}, {&l3, &w3}})
      worst = std::max(worst, test::rel_error(*got, *want));
    if (step >= 1) worst = std::max(worst, test::rel_error(l2, w2));
    if (step == 0) CHECK(std::all_of(l2.begin(), l2.end(), [](float x) { return x == 0.0f; }));
    t0 = model::argmax(w0), t1 = model::argmax(w1), t3 = model::argmax(w3);
    REQUIRE(model::argmax(l0) == t0);
    REQUIRE(model::argmax(l1) == t1);
  }
  INFO("worst relative logit error " << worst);
  CHECK(worst < 1e-4);
  CHECK(r0.logical_length() == s0.logical_length());
  CHECK(r2.logical_length() == s2.logical_length());
  CHECK(r3.logical_length() == s3.logical_length());
}

TEST_CASE("branches on one base are isolated from each other and from the base", "[model]") {
  Fixture f;
  const auto before = f.base_bytes();
  model::BranchCache a(f.base), b(f.base);
  const auto qa = Fixture::tokens(10, 8), qb = Fixture::tokens(14, 9);
  f.fwd.prefill(a, qa);
  const auto b_first = f.fwd.prefill(b, qb);
  // a appends a long answer and rolls part of it back; b's next logits must not move.
  for (int32_t t = 0; t < 30; ++t) f.fwd.decode(a, t);
  a.rollback(f.base.base_length() + 12);
  model::BranchCache b2(f.base);
  CHECK(same_bits(f.fwd.prefill(b2, qb), b_first));
  CHECK(same_bits(f.fwd.decode(b, 5), f.fwd.decode(b2, 5)));
  CHECK(a.logical_length() == f.base.base_length() + 12);
  // a after its rollback equals a fresh branch given the same 12 tokens.
  model::BranchCache a2(f.base);
  std::vector<int32_t> twelve(qa);
  twelve.push_back(0);
  twelve.push_back(1);
  f.fwd.prefill(a2, twelve);
  CHECK(same_bits(f.fwd.decode(a, 40), f.fwd.decode(a2, 40)));
  CHECK(f.base_bytes() == before);
  CHECK(f.base.logical_length() == f.base.base_length());
}

TEST_CASE("branch and step refuse what they cannot do", "[model]") {
  Fixture f;
  model::BranchCache a(f.base);
  f.fwd.prefill(a, Fixture::tokens(3, 1));
  CHECK_THROWS_MATCHES(a.rollback(f.base.base_length() - 1), Error,
                       Catch::Matchers::Predicate<Error>(
                           [](const Error& e) { return e.code() == Errc::invalid_argument; }));
  model::RaggedKvCache grown = f.base;
  f.fwd.decode(grown, 1);
  CHECK_THROWS_AS(model::BranchCache(grown), Error);
  const auto many = Fixture::tokens(65, 2);  // the chunk is 64
  model::BranchCache b(f.base);
  model::StepItem too_big{&b, many, nullptr};
  CHECK_THROWS_AS(f.fwd.step(std::span<const model::StepItem>(&too_big, 1)), Error);
  const int32_t t = 1;
  std::vector<model::StepItem> twice{{&b, std::span<const int32_t>(&t, 1), nullptr},
                                     {&b, std::span<const int32_t>(&t, 1), nullptr}};
  CHECK_THROWS_AS(f.fwd.step(twice), Error);
  const int32_t bad = 97;  // V = 97
  const uint32_t len = a.logical_length();
  std::vector<model::StepItem> one_bad{{&a, std::span<const int32_t>(&t, 1), nullptr},
                                       {&b, std::span<const int32_t>(&bad, 1), nullptr}};
  CHECK_THROWS_AS(f.fwd.step(one_bad), Error);
  CHECK(a.logical_length() == len);  // nothing appended anywhere
  CHECK(b.logical_length() == f.base.base_length());
}
