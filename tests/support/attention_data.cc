// Random attention inputs (tests/support/attention_data.h).
#include "tests/support/attention_data.h"

#include "tests/support/random_weights.h"

namespace kvzip::test {

AttentionData random_attention_data(uint32_t T, uint32_t Hq, uint32_t Hkv, uint32_t D, uint32_t len,
                                    uint64_t seed) {
  AttentionData d;
  d.q = random_vector(size_t(T) * Hq * D, seed, -2, 2);
  d.k.resize(Hkv);
  d.v.resize(Hkv);
  for (uint32_t h = 0; h < Hkv; ++h) {
    d.k[h] = random_vector(size_t(len) * D, seed * 31 + h, -2, 2);
    d.v[h] = random_vector(size_t(len) * D, seed * 37 + h);
    d.spans.push_back(kernels::KvSpan{d.k[h].data(), d.v[h].data(), len});
  }
  return d;
}

}  // namespace kvzip::test
