// Test support: quantized_head (see quant_rows.h).
#include "tests/support/quant_rows.h"

#include "tests/support/random_weights.h"

namespace kvzip::test {

kernels::KvQuantSegment QuantHead::segment() const {
  return {{layout, rows, ck.data(), pk.data(), qk.data()},
          {layout, rows, cv.data(), pv.data(), qv.data()}};
}

QuantHead quantized_head(const kernels::KvQuantLayout& layout, size_t rows, uint64_t seed) {
  const size_t D = layout.D;
  auto xk = random_vector(rows * D, seed * 41 + 1, -1, 1);
  for (size_t i = 0; i < xk.size(); ++i)
    if (i % D % 11 == 3) xk[i] = 8.0f * xk[i] + 2.0f;
  const auto xv = random_vector(rows * D, seed * 43 + 2, -1, 1);
  QuantHead h;
  h.rows = rows;
  h.layout = layout;
  h.ck.resize(D), h.cv.resize(D);
  h.pk.resize(rows * layout.param_words()), h.pv.resize(rows * layout.param_words());
  h.qk.resize(rows * layout.code_bytes()), h.qv.resize(rows * layout.code_bytes());
  kernels::cpu::kv_quantize_rows(xk.data(), {layout, rows, h.ck.data(), h.pk.data(), h.qk.data()});
  kernels::cpu::kv_quantize_rows(xv.data(), {layout, rows, h.cv.data(), h.pv.data(), h.qv.data()});
  return h;
}

}  // namespace kvzip::test
