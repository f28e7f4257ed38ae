// Test support: one KV head's q8/q4 rows as attention tests use them (kernels/kv_quant.h): random
// keys with outlier channels (every 11th channel from 3 scaled by 8 and shifted by 2, as keys'
// typical outliers) and random values in [-1, 1), quantized by kernels::cpu::kv_quantize_rows.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/kv_quant.h"

namespace kvzip::test {

struct QuantHead {
  std::vector<float> ck, cv;     // (D) channel scales of K and V
  std::vector<uint16_t> pk, pv;  // (rows, param_words)
  std::vector<uint8_t> qk, qv;   // (rows, code_bytes)
  size_t rows = 0;
  kernels::KvQuantLayout layout;
  // Views into the vectors above (valid while this object is alive and unmoved).
  kernels::KvQuantSegment segment() const;
};

// `rows` rows in `layout`, from seeds derived from `seed`.
QuantHead quantized_head(const kernels::KvQuantLayout& layout, size_t rows, uint64_t seed);

}  // namespace kvzip::test
