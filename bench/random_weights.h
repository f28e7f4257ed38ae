// Shared by the kernel benchmarks: weight matrices of random blocks in any stored type, with
// small, finite fp16 scales (the speed of a product does not depend on the values, but NaN or
// infinite scales would make the float units take slow paths).
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/half.h"
#include "kernels/quant.h"

namespace kvzip::bench {

// The stored type named `name` ("q4_0", "q4_K", ...); exits with a message for an unknown name.
inline kernels::quant::GgmlType type_by_name(const std::string& name) {
  for (uint32_t id = 0; id < 40; ++id)
    if (const kernels::quant::TypeTraits* tr = kernels::quant::type_traits(id);
        tr && name == tr->name)
      return kernels::quant::GgmlType(id);
  std::fprintf(stderr, "unknown type %s\n", name.c_str());
  std::exit(2);
}

inline void put_half(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  p[0] = uint8_t(h), p[1] = uint8_t(h >> 8);
}

// rows x cols of type t as stored (quant::row_bytes(t, cols) bytes a row).
inline std::vector<uint8_t> random_blocks(kernels::quant::GgmlType t, uint32_t rows, uint32_t cols,
                                          uint32_t seed = 12345) {
  using kernels::quant::GgmlType;
  std::vector<uint8_t> b(size_t(rows) * kernels::quant::row_bytes(t, cols));
  uint32_t s = seed;
  for (auto& x : b) x = uint8_t((s = s * 1664525u + 1013904223u) >> 24);
  const auto& tr = kernels::quant::traits(t);
  if (t == GgmlType::F32) {
    for (size_t i = 0; i < b.size() / 4; ++i) {
      const float v = float(int(b[4 * i]) - 128) / 4096.0f;
      std::memcpy(&b[4 * i], &v, 4);
    }
  } else if (t == GgmlType::F16 || t == GgmlType::BF16) {
    for (size_t i = 0; i < b.size() / 2; ++i) {
      const float v = float(int(b[2 * i]) - 128) / 4096.0f;
      const uint16_t h = t == GgmlType::F16 ? f32_to_f16(v) : f32_to_bf16(v);
      b[2 * i] = uint8_t(h), b[2 * i + 1] = uint8_t(h >> 8);
    }
  } else {
    for (size_t k = 0; k < b.size() / size_t(tr.block_bytes); ++k) {
      uint8_t* blk = b.data() + k * size_t(tr.block_bytes);
      if (t == GgmlType::Q6_K) {
        put_half(blk + 208, 1e-3f);
      } else {
        put_half(blk, 1e-3f);
        if (t == GgmlType::Q4_1 || t == GgmlType::Q5_1 || t == GgmlType::Q4_K ||
            t == GgmlType::Q5_K)
          put_half(blk + 2, 1e-3f);
      }
    }
  }
  return b;
}

}  // namespace kvzip::bench
