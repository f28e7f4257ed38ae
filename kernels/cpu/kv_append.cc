// CPU ragged append (kernels/kv_append.h): one memcpy per (token, head) row of K and of V.
#include "kernels/kv_append.h"

#include <cstring>

namespace kvzip::kernels::cpu {

void kv_append(const KvAppendArgs& a) {
  const size_t row = size_t(a.D) * sizeof(float);
  for (uint32_t t = 0; t < a.T; ++t)
    for (uint32_t h = 0; h < a.Hkv; ++h) {
      const size_t src = (size_t(t) * a.Hkv + h) * a.D, dst = (a.dst_row[h] + t) * a.D;
      std::memcpy(a.k + dst, a.k_new + src, row);
      std::memcpy(a.v + dst, a.v_new + src, row);
    }
}

}  // namespace kvzip::kernels::cpu
