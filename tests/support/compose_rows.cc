// The composition tests' shared helpers (tests/support/compose_rows.h).
#include "tests/support/compose_rows.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kvzip::test {

void HeadRows::add(const model::KvHeadView& view, uint32_t from, uint32_t D) {
  for (uint32_t j = from; j < view.len; ++j) {
    k.insert(k.end(), view.k + size_t(j) * D, view.k + size_t(j + 1) * D);
    v.insert(v.end(), view.v + size_t(j) * D, view.v + size_t(j + 1) * D);
    pos.push_back(view.positions[j]);
  }
}

model::RaggedKvCache assemble(const std::vector<HeadRows>& heads, model::CacheShape shape,
                              uint32_t length) {
  std::vector<uint32_t> kept;
  for (const HeadRows& h : heads) kept.push_back(static_cast<uint32_t>(h.pos.size()));
  model::RaggedKvCache c(shape, length, kept, 64);
  for (uint32_t l = 0; l < shape.n_layers; ++l)
    for (uint32_t h = 0; h < shape.n_kv_heads; ++h) {
      const HeadRows& r = heads[size_t(l) * shape.n_kv_heads + h];
      std::memcpy(c.k_rows(l, h), r.k.data(), r.k.size() * sizeof(float));
      std::memcpy(c.v_rows(l, h), r.v.data(), r.v.size() * sizeof(float));
      std::memcpy(c.positions(l, h), r.pos.data(), r.pos.size() * sizeof(uint32_t));
    }
  return c;
}

model::GenerateParams greedy(uint32_t n) {
  model::GenerateParams p;
  p.max_tokens = n;
  return p;
}

std::vector<int32_t> ids(const std::vector<uint32_t>& t) {
  return std::vector<int32_t>(t.begin(), t.end());
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, double(std::fabs(a[i] - b[i])));
  return d;
}

}  // namespace kvzip::test
